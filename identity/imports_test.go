package identity_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolgate/toolgate/"

// imports returns the import paths of the non-test Go files of dir (a
// directory relative to the module root), each with the file importing it.
func imports(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (err %v)", dir, err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		for _, is := range af.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			out[p] = filepath.Base(f)
		}
	}
	return out
}

// TestOnlyPipelineImportsPolicy is issue 16 point 9: the transports, the
// console and the authenticators name principals through package identity
// and compiled policies through the pipeline's types; none of them imports
// the decision engine, so "only the pipeline decides" is visible in the
// import graph.
func TestOnlyPipelineImportsPolicy(t *testing.T) {
	for _, dir := range []string{"internal/mcpgw", "internal/httpapi", "internal/console", "internal/auth"} {
		for p, file := range imports(t, dir) {
			if p == module+"policy" || strings.HasPrefix(p, module+"policy/") {
				t.Errorf("%s/%s imports %s: name identity.Principal and pipeline.Policy instead", dir, file, p)
			}
		}
	}
	// The pipeline itself does decide: if this ever fails the check above
	// is looking at the wrong tree.
	if _, ok := imports(t, "internal/pipeline")[module+"policy"]; !ok {
		t.Error("internal/pipeline does not import policy: the test no longer sees the import graph")
	}
}

// TestIdentityIsALeaf: identity imports only the standard library, so any
// package may name a principal without pulling in the gate.
func TestIdentityIsALeaf(t *testing.T) {
	for p, file := range imports(t, "identity") {
		if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
			t.Errorf("identity/%s imports %s: identity must stay a standard-library-only leaf", file, p)
		}
	}
}
