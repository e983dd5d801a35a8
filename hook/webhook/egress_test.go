package webhook_test

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/hook/webhook"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
	"github.com/toolgate/toolgate/receipt"
)

// TestEgressGuardedHook: an enforce hook whose URL names a host that
// resolves to loopback, sent through the SSRF guard, never reaches the
// listening 127.0.0.1 server: the call is refused (fail closed) as
// egress_denied naming the rule and the hook (not the hook's host), the
// tool does not run, and the refusal is receipted. With the address
// allowed by CIDR, the same hook is reached and allows the call.
func TestEgressGuardedHook(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	res := egresstest.Static(map[string][]string{"hooks.example.test": {"127.0.0.1"}})
	for _, tc := range []struct {
		name  string
		allow []netip.Prefix
	}{{"refused", nil}, {"allowed", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			client := egress.NewClient(egress.Policy{AllowHosts: []string{"hooks.example.test"}, AllowCIDRs: tc.allow}, egress.WithResolver(res))
			h, err := webhook.New(webhook.Options{Name: "dlp", URL: "http://hooks.example.test:" + port + "/hook", Secret: secret, Mode: hook.Enforce, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			gw, ran := gateway(t, hook.Registration{Name: "dlp", Hook: h, Mode: hook.Enforce, Timeout: 5 * time.Second})
			r := call(t, gw, `{"path":"/tmp/a"}`)
			if tc.allow != nil {
				if r.Status != audit.StatusOK || hits.Load() == 0 || len(*ran) != 1 {
					t.Fatalf("allowed by CIDR: %s %+v, hook hits %d, ran %d", r.Status, r.Err, hits.Load(), len(*ran))
				}
				return
			}
			if r.Status != audit.StatusForbidden || r.Err == nil || r.Err.Code != errcode.EgressDenied || r.ReceiptID == "" {
				t.Fatalf("%s %+v: want forbidden egress_denied, receipted", r.Status, r.Err)
			}
			if r.Err.Details["rule"] != "loopback" || r.Err.Details["hook"] != "dlp" {
				t.Fatalf("details %v: want rule loopback, hook dlp", r.Err.Details)
			}
			if strings.Contains(r.Err.Message, "hooks.example.test") || strings.Contains(r.Err.Message, "127.0.0.1") {
				t.Fatalf("message %q names the hook's address", r.Err.Message)
			}
			if hits.Load() != 0 || len(*ran) != 0 {
				t.Fatalf("hook hits %d, tool ran %d: want 0, 0", hits.Load(), len(*ran))
			}
			var buf bytes.Buffer
			if err := gw.WriteReceipts(&buf); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), `"egress_denied"`) {
				t.Fatalf("no receipt records egress_denied: %s", buf.String())
			}
			if _, err := receipt.Verify(&buf, gw.PublicKey(), receipt.VerifyOptions{}); err != nil {
				t.Fatalf("receipts: %v", err)
			}
		})
	}
}
