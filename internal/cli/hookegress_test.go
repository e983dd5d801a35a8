package cli

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
)

// TestBuildHooksEgress: serve's hooks[].egress wiring. A hook with an
// egress block is sent through the SSRF guard (its loopback address is
// refused, nothing reaches it); one without keeps today's unguarded
// client and is reached.
func TestBuildHooksEgress(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	t.Setenv("TOOLGATE_TEST_HOOK_SECRET", "s3cret-value-0123")
	cfg, err := config.Parse("c.yaml", []byte(`
credentials: {hs: {env: TOOLGATE_TEST_HOOK_SECRET}}
hooks:
  - {name: guarded, mode: enforce, url: "`+srv.URL+`/h", secret: "{{credential:hs}}", egress: {}}
  - {name: plain, mode: enforce, url: "`+srv.URL+`/h", secret: "{{credential:hs}}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	regs, hs, err := buildHooks(cfg, audit.NewRedactor(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, h := range hs {
			h.Close()
		}
	}()
	c := &hook.Call{CallID: "c1", RunID: "r1", ToolID: "native:x", Principal: "alice", ArgsHash: "00"}
	_, err = regs[0].Hook.Before(t.Context(), c)
	var d *egress.DeniedError
	if !errors.As(err, &d) || d.Rule != "loopback" {
		t.Fatalf("guarded hook: %v, want an egress denial (loopback)", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the guarded hook reached its server %d times", hits.Load())
	}
	if _, err := regs[1].Hook.Before(t.Context(), c); err != nil || hits.Load() != 1 {
		t.Fatalf("unguarded hook: %v, hits %d, want reached once", err, hits.Load())
	}
}
