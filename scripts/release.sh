#!/usr/bin/env bash
# Build versioned, static toolgate binaries.
#
#   scripts/release.sh VERSION [OUTDIR]
#
# VERSION is a semantic version such as v1.2.3 or v1.2.3-rc.1; OUTDIR
# defaults to dist/. For each platform (default linux/amd64 and
# linux/arm64; set PLATFORMS="linux/amd64" for fewer) it writes
# OUTDIR/toolgate-VERSION-OS-ARCH, built with CGO_ENABLED=0 (a static
# binary: the SQLite driver is pure Go), -trimpath (no build paths in the
# binary) and the version embedded with
# -ldflags -X github.com/toolgate/toolgate/internal/version.Version=VERSION,
# the one value `toolgate version`, MCP initialize (serverInfo.version) and
# the OpenWOP discovery document (implementation.version) report. Then
# OUTDIR/SHA256SUMS lists the binaries. Needs only the Go toolchain and the
# module cache (or the Go module proxy).
set -euo pipefail

usage() {
	echo "usage: scripts/release.sh VERSION [OUTDIR]   (VERSION like v1.2.3 or v1.2.3-rc.1)" >&2
	exit 2
}
[[ $# -ge 1 && $# -le 2 ]] || usage
version=$1
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] || usage
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${2:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
platforms=${PLATFORMS:-linux/amd64 linux/arm64}

cd "$root"
names=()
for p in $platforms; do
	os=${p%/*}
	arch=${p#*/}
	[[ -n $os && -n $arch && $os != "$p" ]] || { echo "release: bad platform $p (want OS/ARCH)" >&2; exit 2; }
	name="toolgate-$version-$os-$arch"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
		-ldflags "-s -w -X github.com/toolgate/toolgate/internal/version.Version=$version" \
		-o "$out/$name" ./cmd/toolgate
	names+=("$name")
	echo "release: $out/$name"
done
(cd "$out" && sha256sum "${names[@]}" > SHA256SUMS)
echo "release: $out/SHA256SUMS"
