package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/config"
)

// Every examples/*.yaml passes `toolgate validate --offline` (issue 16
// point 6), so the examples cannot rot; quickstart.yaml is the quick
// start's embedded configuration; the multi-replica pair shares
// PostgreSQL, Redis, the policy and the approval-binding secret and differs
// in listen and signing key.
func TestExamples(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // the examples' relative paths are from the repository root
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.yaml") {
			continue // policy tests (TestPolicyTestExamples)
		}
		names = append(names, filepath.Base(f))
		code, out, errOut := run(t, "", "validate", "--offline", "--config", f)
		if code != ExitOK || !strings.HasPrefix(out, f+": OK") {
			t.Errorf("validate --offline --config %s: %d\n%s%s", f, code, out, errOut)
		}
	}
	for _, want := range []string{"quickstart.yaml", "stdio-two-principals.yaml", "multi-replica-a.yaml", "multi-replica-b.yaml"} {
		if !slices.Contains(names, want) {
			t.Errorf("examples/%s is missing (have %v)", want, names)
		}
	}

	qs, err := os.ReadFile("examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(quickStart, "127.0.0.1:7070", strings.Repeat("0", 64))
	head, ok := strings.CutSuffix(string(qs), want)
	if !ok {
		t.Errorf("examples/quickstart.yaml is not the embedded quick start (serve.go quickStart) after its comment:\n%s", qs)
	}
	for _, l := range strings.Split(strings.TrimSuffix(head, "\n"), "\n") {
		if !strings.HasPrefix(l, "#") {
			t.Errorf("examples/quickstart.yaml: %q before the quick start is not a comment", l)
		}
	}

	load := func(name string) *config.Config {
		c, err := config.Load("examples/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := load("multi-replica-a.yaml"), load("multi-replica-b.yaml")
	if a.Store.Driver != "postgres" || a.RateLimit.Backend != "redis" || a.Store != b.Store || a.RateLimit != b.RateLimit {
		t.Errorf("replicas do not share PostgreSQL and Redis: %+v %+v / %+v %+v", a.Store, a.RateLimit, b.Store, b.RateLimit)
	}
	if a.Listen == b.Listen || a.Signing.KeyFile == b.Signing.KeyFile {
		t.Errorf("replicas share listen (%s, %s) or signing key (%s, %s)", a.Listen, b.Listen, a.Signing.KeyFile, b.Signing.KeyFile)
	}
	if a.Policy.Version() != b.Policy.Version() || len(a.Auth.APIKeys) != len(b.Auth.APIKeys) {
		t.Errorf("replicas have different policies or keys")
	}
	if a.Approvals.BindingSecret == "" || a.Approvals.BindingSecret != b.Approvals.BindingSecret || a.Credentials["approval-binding"] != b.Credentials["approval-binding"] {
		t.Errorf("replicas do not share one approvals.binding_secret: %q %q", a.Approvals.BindingSecret, b.Approvals.BindingSecret)
	}

	s := load("stdio-two-principals.yaml")
	if len(s.Servers) != 2 || len(s.Servers[0].Command) == 0 || len(s.Servers[1].Command) == 0 || len(s.Auth.APIKeys) != 2 ||
		slices.Equal(s.Auth.APIKeys[0].Scopes, s.Auth.APIKeys[1].Scopes) {
		t.Errorf("stdio example: want two stdio servers and two principals with different scopes: %+v %+v", s.Servers, s.Auth.APIKeys)
	}
}
