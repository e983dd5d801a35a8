package cli

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// `toolgate key` prints a key once and an auth.api_keys entry that
// authenticates exactly that key as the given principal.
func TestKey(t *testing.T) {
	code, out, errOut := run(t, "", "key", "--id", "alice", "--tenant", "acme", "--scope", "fs:read", "--scope", "web:read")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`API key \(shown once\): (tg_\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no key in %q", out)
	}
	key := m[1]
	yaml := out[strings.Index(out, "auth:"):] + "policy: {default: deny}\n"
	cfg, err := config.Parse("toolgate.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("the printed entry does not parse: %v\n%s", err, yaml)
	}
	a, err := auth.New(context.Background(), cfg.Auth, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	p, err := a.Authenticate(req)
	if err != nil {
		t.Fatalf("the printed key does not authenticate: %v", err)
	}
	if p.ID != "alice" || p.Tenant != "acme" || strings.Join(p.Scopes, ",") != "fs:read,web:read" {
		t.Errorf("principal %+v", p)
	}
	// key prints only ids the config accepts (auth.api_keys[].id).
	for _, bad := range []string{"bad id", "alice@acme.com", "_x", strings.Repeat("a", 65)} {
		if code, _, errOut := run(t, "", "key", "--id", bad); code != 2 || !strings.Contains(errOut, "--id") || !strings.Contains(errOut, "starting with a letter or digit") {
			t.Errorf("bad --id %q: exit %d, %q", bad, code, errOut)
		}
	}
}
