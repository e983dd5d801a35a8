// Package version holds toolgate's version: the one value that `toolgate
// version` prints, MCP initialize reports as serverInfo.version (and the
// gateway's upstream clients as clientInfo.version) and the OpenWOP
// discovery document as implementation.version.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set at build time, as scripts/release.sh does:
//
//	go build -ldflags "-X github.com/toolgate/toolgate/internal/version.Version=v1.2.3" ./cmd/toolgate
//
// Left empty, String falls back to the module version the Go toolchain
// recorded. Read it through String.
var Version = ""

// String is the version: Version when set at build time, else the main
// module's version from the build info (a tag or pseudo-version when built
// with `go install …@v1.2.3` or from a VCS checkout), else "dev". Safe for
// concurrent use; computed once.
func String() string { return get() }

var get = sync.OnceValue(func() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
})
