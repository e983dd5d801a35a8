package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// chromiumPath is the Debian chromium binary (scripts/test.sh installs it).
const chromiumPath = "/usr/bin/chromium"

// consoleUpstream is a Streamable HTTP MCP server with the tools echo,
// write and secret; each answers "<tool>: <text>".
func consoleUpstream(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, name := range []string{"echo", "write", "secret"} {
		s.AddTool(&mcp.Tool{Name: name, Title: `<img src=x id=pwn-` + name + `> ` + name, InputSchema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ": " + string(req.Params.Arguments)}}}, nil
			})
	}
	srv := newLoopbackServer(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	return srv
}

// newLoopbackServer serves h on 127.0.0.1 until t ends and returns its URL.
func newLoopbackServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// jwtIssuer serves a JWKS with one ES256 key on 127.0.0.1 and returns its
// URL and a function signing a token for sub (tenant tid, scopes scope)
// valid for an hour.
func jwtIssuer(t *testing.T) (string, func(sub, tid, scope string) string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	iss := newLoopbackServer(t, mux)
	return iss, func(sub, tid, scope string) string {
		sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sg).Claims(map[string]any{"iss": iss, "aud": "toolgate", "sub": sub, "tid": tid, "scope": scope,
			"iat": time.Now().Add(-time.Minute).Unix(), "exp": time.Now().Add(time.Hour).Unix()}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
}

// browser starts one headless Chromium (the flags issue 16 point 5 names,
// a fresh profile) for the test and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is required at %s (apt-get install -y chromium chromium-driver; scripts/test.sh does): %v", chromiumPath, err)
	}
	// A bound on the whole browser session: a hung Chromium fails the test
	// instead of holding it until the suite's timeout.
	bounded, cancelBound := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancelBound)
	alloc, cancelAlloc := chromedp.NewExecAllocator(bounded,
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 720))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// tab opens a tab in its own browser context (its own cookie jar) of b.
func tab(t *testing.T, b context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// js evaluates expr in the tab and returns its value, failing t on error.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS polls the page (every 20 ms; an evaluation that fails while a
// page loads counts as false) until expr is truthy, failing t after within,
// and returns how long it took.
func waitJS(t *testing.T, ctx context.Context, what, expr string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var lastErr error
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return time.Since(start)
		}
		lastErr = err
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s (last error: %v)", what, within, lastErr)
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// screenshot saves a PNG of the tab's page as <name>.png in
// $TOOLGATE_SCREENSHOTS (default: a temp dir of t).
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signIn signs the tab in with key and waits for the catalog page.
func signIn(t *testing.T, ctx context.Context, base, key string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/signin"),
		chromedp.SendKeys(chromedp.CSS("#credential"), key), chromedp.Click(chromedp.CSS("#signin-submit"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "signed in", `location.pathname === "/ui/catalog" && document.getElementById("catalog") !== null`, 10*time.Second)
}

// TestConsoleInBrowser (issue 16 point 5, acceptance 3): a real serve on
// 127.0.0.1 with an upstream, driven by headless Chromium: sign-in; the
// catalog shows exactly what tools/list shows; an MCP call appears in live
// audit within 2 s; an approver approves a pending call in the console and
// the waiting MCP client gets its result; a POST without the CSRF token is
// refused 403; a principal without the approver scope sees no approve
// button and its POST is refused. Screenshots of each page are saved.
func TestConsoleInBrowser(t *testing.T) {
	start := time.Now()
	upURL := consoleUpstream(t)
	issURL, mint := jwtIssuer(t)
	dir := t.TempDir()
	shots := os.Getenv("TOOLGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	var keyLines strings.Builder
	for _, p := range []struct{ id, scopes, tenant string }{
		{"alice", "[]", "t1"},
		{"dave", "[toolgate:approve, toolgate:admin, toolgate:audit, secret:read]", "t1"},
		{"eve", "[toolgate:approve, toolgate:admin, secret:read]", "t2"},
	} {
		k, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[p.id] = k
		fmt.Fprintf(&keyLines, "    - {id: %s, key_sha256: %q, tenant: %s, scopes: %s}\n", p.id, auth.HashKey(k), p.tenant, p.scopes)
	}
	// A credential from a file (configured) and one from an unset
	// environment variable (missing), for the Catalog's Credential column.
	credFile := filepath.Join(dir, "filed.key")
	if err := os.WriteFile(credFile, []byte("not-a-real-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOOLGATE_CONSOLE_TEST_UNSET_KEY", "")
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	if err := os.WriteFile(cfgFile, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %q}
signing: {key_file: %q}
auth:
  api_keys:
%s  jwt: {issuer: %q, audience: toolgate, jwks_url: %q}
servers:
  - {name: up, url: %q}
credentials:
  unset-key: {env: TOOLGATE_CONSOLE_TEST_UNSET_KEY}
  filed-key: {file: %q}
http_tools:
  - {name: keyed, url: "http://127.0.0.1:1/k", headers: {X-Api-Key: "{{credential:unset-key}}"}}
  - {name: filed, url: "http://127.0.0.1:1/f", headers: {X-Api-Key: "{{credential:filed-key}}"}}
  - {name: plain, url: "http://127.0.0.1:1/p"}
tools:
  - {match: "mcp:up.*", safety_tier: read, egress: none}
  - {match: "mcp:up.write", safety_tier: write}
  - {match: "mcp:up.secret", scopes: [secret:read]}
policy:
  default: deny
  rules:
    - {id: echo, effect: allow, tools: ["mcp:up.echo", "mcp:up.secret"]}
    - {id: writers, effect: allow, tools: ["mcp:up.write"]}
    - {id: http-tools, effect: allow, tools: ["http:*"]}
    - {id: writes-need-approval, effect: require_approval, tools: ["mcp:up.write"], when: 'has(args.text)', reason: "writes need a human"}
approvals: {ttl: 1h, wait: 20s, approvers_scope: "toolgate:approve"}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), keyLines.String(), issURL, issURL+"/jwks", upURL+"/", credFile), 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs := startServeInProcess(t, cfgFile)
	mcpClient := func(key string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "console-test", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	aliceMCP, daveMCP := mcpClient(keys["alice"]), mcpClient(keys["dave"])
	b := browser(t)
	booted := time.Now()
	alice, dave, eve, jwtUser := tab(t, b), tab(t, b), tab(t, b), tab(t, b)
	token := mint("user-1", "t1", "secret:read")

	// Every /ui/ page but sign-in and the assets needs a session; the
	// security headers are on every answer.
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(base + "/ui/catalog")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/signin" {
		t.Errorf("GET /ui/catalog without a session: %d %q, want 303 to /ui/signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if xfo := resp.Header.Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("X-Frame-Options = %q", xfo)
	}
	if resp, err := http.Get(base + "/ui/api/v1/tools"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/api/v1/tools without a session: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Sign-in without the form's CSRF token is refused; with it, the
	// session cookie is HttpOnly, SameSite=Strict, scoped to /ui/ and not
	// Secure over plain HTTP.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.PostForm(base+"/ui/signin", url.Values{"credential": {keys["alice"]}}); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in without the CSRF token: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	{
		resp, err := noFollow.Get(base + "/ui/signin")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
		if m == nil || len(resp.Cookies()) != 1 {
			t.Fatalf("sign-in page: no CSRF field or cookie: %s", page)
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/ui/signin", strings.NewReader(url.Values{"credential": {keys["alice"]}, "csrf": {string(m[1])}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(resp.Cookies()[0])
		resp, err = noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var sess *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "toolgate_session" {
				sess = c
			}
		}
		if resp.StatusCode != http.StatusSeeOther || sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/ui/" || sess.Secure {
			t.Errorf("sign-in: %d, session cookie %+v", resp.StatusCode, sess)
		}
		// Sign-out without the session's CSRF token is refused.
		req, _ = http.NewRequest(http.MethodPost, base+"/ui/signout", strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(sess)
		if resp, err := noFollow.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("sign-out without the CSRF token: %v %v, want 403", resp, err)
		} else {
			resp.Body.Close()
		}
	}

	// 1. Sign in (a wrong key is refused), see the session cookie's flags.
	if err := chromedp.Do(alice, chromedp.Navigate(base+"/ui/signin")); err != nil {
		t.Fatal(err)
	}
	screenshot(t, alice, shots, "signin")
	if err := chromedp.Do(alice, chromedp.SendKeys(chromedp.CSS("#credential"), "tg_wrong"), chromedp.Click(chromedp.CSS("#signin-submit"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, alice, "a wrong key is refused", `document.getElementById("signin-error") !== null`, 10*time.Second)
	signIn(t, alice, base, keys["alice"])
	signIn(t, dave, base, keys["dave"])
	signIn(t, eve, base, keys["eve"])
	signIn(t, jwtUser, base, token) // a JWT, checked by the same authenticator
	if who := js[string](t, jwtUser, `document.getElementById("who").textContent`); who != "user-1 @ t1" {
		t.Errorf("JWT sign-in: signed in as %q", who)
	}
	if c := js[string](t, alice, `document.cookie`); c != "" {
		t.Errorf("document.cookie = %q: the session cookie must be HttpOnly", c)
	}
	for name, page := range map[string]string{"alice": js[string](t, alice, `document.documentElement.outerHTML`), "dave": js[string](t, dave, `document.documentElement.outerHTML`)} {
		for _, k := range keys {
			if strings.Contains(page, k) {
				t.Errorf("%s's page holds an API key", name)
			}
		}
	}

	// 2. The catalog shows exactly what tools/list shows, per principal.
	for _, c := range []struct {
		name string
		tab  context.Context
		cs   *mcp.ClientSession
	}{{"alice", alice, aliceMCP}, {"dave", dave, daveMCP}, {"user-1 (JWT)", jwtUser, mcpClient(token)}} {
		res, err := c.cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, tl := range res.Tools {
			switch tl.Name {
			case "keyed", "filed", "plain":
				want = append(want, "http:"+tl.Name)
			default:
				want = append(want, "mcp:up."+tl.Name)
			}
		}
		slices.Sort(want)
		got := js[[]string](t, c.tab, `Array.from(document.querySelectorAll("#catalog tr.tool")).map(r => r.dataset.toolId).sort()`)
		if !slices.Equal(got, want) {
			t.Errorf("%s: catalog shows %v, tools/list %v", c.name, got, want)
		}
		if len(want) == 0 {
			t.Errorf("%s sees no tool: the comparison proves nothing", c.name)
		}
	}
	if got := js[[]string](t, alice, `Array.from(document.querySelectorAll("#catalog tr.tool")).map(r => r.dataset.toolId)`); slices.Contains(got, "mcp:up.secret") {
		t.Errorf("alice (no secret:read) sees mcp:up.secret: %v", got)
	}
	// Upstream text is escaped, never markup: the tools' titles hold an
	// <img> tag that must show as text.
	if n := js[int](t, dave, `document.querySelectorAll("#catalog img").length`); n != 0 {
		t.Errorf("the catalog rendered %d <img> elements from upstream titles", n)
	}
	if !strings.Contains(js[string](t, dave, `document.getElementById("catalog").textContent`), "<img src=x id=pwn-echo> echo") {
		t.Errorf("the catalog does not show the upstream title as text")
	}
	// An admin sees which of its tenant's principals see each tool (eve is
	// of another tenant).
	vis := js[map[string]string](t, dave, `Object.fromEntries(Array.from(document.querySelectorAll("#catalog tr.tool")).map(r => [r.dataset.toolId, r.querySelector(".visible-to").textContent]))`)
	if vis["mcp:up.echo"] != "alice, dave" || vis["mcp:up.secret"] != "dave" {
		t.Errorf("admin's visible-to column: %v", vis)
	}
	// The Credential column says whether a needed credential resolves.
	creds := js[map[string]string](t, dave, `Object.fromEntries(Array.from(document.querySelectorAll("#catalog tr.tool")).map(r => [r.dataset.toolId, r.querySelector(".credential").textContent]))`)
	if creds["http:keyed"] != "needed, missing" || creds["http:filed"] != "needed, configured" || creds["http:plain"] != "no" || creds["mcp:up.echo"] != "no" {
		t.Errorf("catalog credential column: %v", creds)
	}
	screenshot(t, dave, shots, "catalog")

	// 3. A call made through MCP appears in live audit within 2 s.
	if err := chromedp.Do(dave, chromedp.Navigate(base+"/ui/audit")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, dave, "the audit stream opens", `document.getElementById("stream-state").textContent === "live"`, 10*time.Second)
	called := time.Now()
	if res, err := aliceMCP.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}); err != nil || res.IsError {
		t.Fatalf("echo: %v %+v", err, res)
	}
	callMs := time.Since(called)
	seen := waitJS(t, dave, "the MCP call in live audit",
		`Array.from(document.querySelectorAll("#audit-rows tr.call")).some(r => r.dataset.tool === "mcp:up.echo" && r.dataset.status === "ok" && r.querySelector(".principal").textContent === "alice")`,
		4*time.Second) // the 2 s, with a margin for a loaded CI machine; the figure is logged
	t.Logf("live audit: the call (%s) was shown %s after it returned (issue target: 2 s)", callMs.Round(time.Millisecond), seen.Round(time.Millisecond))
	// An allowed call shows the rule that allowed it, as a refusal shows
	// the rule that refused it.
	if rule := js[string](t, dave, `Array.from(document.querySelectorAll("#audit-rows tr.call")).find(r => r.dataset.tool === "mcp:up.echo").querySelector(".rule").textContent`); rule != "echo" {
		t.Errorf("live audit: the allowed echo call's rule is %q, want echo", rule)
	}
	// The status filter hides it; clearing it shows it again.
	if err := chromedp.Do(dave, chromedp.SetValue(chromedp.CSS("#filter-status"), "error"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("filter-status").dispatchEvent(new Event("input"))`)); err != nil {
		t.Fatal(err)
	}
	if vis := js[int](t, dave, `Array.from(document.querySelectorAll("#audit-rows tr.call")).filter(r => !r.hidden).length`); vis != 0 {
		t.Errorf("filter status=error shows %d ok rows", vis)
	}
	if err := chromedp.Do(dave, chromedp.SetValue(chromedp.CSS("#filter-status"), ""),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("filter-status").dispatchEvent(new Event("input"))`)); err != nil {
		t.Fatal(err)
	}
	// A click on the call shows its event pair and its receipt, checked
	// server-side (GET /v1/receipts/{id}/verify): verified, each check shown.
	if err := chromedp.Do(dave, chromedp.Evaluate[chromedp.Void](
		`Array.from(document.querySelectorAll("#audit-rows tr.call")).find(r => r.dataset.tool === "mcp:up.echo" && r.dataset.status === "ok").click()`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, dave, "the receipt verified in the call's detail",
		`document.getElementById("receipt-verdict").textContent === "verified"`, 10*time.Second)
	if n := js[int](t, dave, `document.querySelectorAll("#receipt-checks li.check-ok").length`); n != 3 {
		t.Errorf("receipt view: %d passed checks shown, want 3 (hash, chainLink, signature): %s", n,
			js[string](t, dave, `document.getElementById("receipt-checks").textContent`))
	}
	if pair := js[string](t, dave, `document.getElementById("audit-detail-json").textContent`); !strings.Contains(pair, "agent.toolCalled") || !strings.Contains(pair, "agent.toolReturned") {
		t.Errorf("the detail does not show the event pair: %s", pair)
	}
	if rc := js[string](t, dave, `document.getElementById("receipt-json").textContent`); !strings.Contains(rc, `"receiptId"`) || !strings.Contains(rc, `"sig"`) && !strings.Contains(rc, `"hash"`) {
		t.Errorf("the detail does not show the receipt: %s", rc)
	}
	screenshot(t, dave, shots, "audit")

	// 4. An approver approves a pending call; the waiting MCP client gets
	// its result. Alice (no approver scope) sees her pending call with no
	// approve button, and her POST is refused.
	type callResult struct {
		res *mcp.CallToolResult
		err error
	}
	waiting := make(chan callResult, 1)
	go func() {
		res, err := aliceMCP.CallTool(context.Background(), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "ship it"}})
		waiting <- callResult{res, err}
	}()
	if err := chromedp.Do(alice, chromedp.Navigate(base+"/ui/approvals")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, alice, "alice sees her pending approval", `document.querySelector("#approval-rows tr.approval") !== null`, 10*time.Second)
	if n := js[int](t, alice, `document.querySelectorAll("button.approve, button.deny").length`); n != 0 {
		t.Errorf("alice (no approver scope) sees %d decision buttons", n)
	}
	id := js[string](t, alice, `document.querySelector("#approval-rows tr.approval").dataset.approvalId`)
	status := js[int](t, alice, `fetch("/ui/api/v1/approvals/`+id+`/approve", {method: "POST", headers: {"X-CSRF-Token": document.body.dataset.csrf, "Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`)
	if status != http.StatusForbidden {
		t.Errorf("alice's approve POST (with the CSRF token): %d, want 403", status)
	}
	screenshot(t, alice, shots, "approvals-requester")

	if err := chromedp.Do(dave, chromedp.Navigate(base+"/ui/approvals")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, dave, "dave sees the pending approval", `document.querySelector("#approval-rows tr.approval button.approve") !== null`, 10*time.Second)
	row := js[map[string]string](t, dave, `(() => { const r = document.querySelector("#approval-rows tr.approval"); return {id: r.dataset.approvalId, text: r.textContent}; })()`)
	if row["id"] != id || !strings.Contains(row["text"], "mcp:up.write") || !strings.Contains(row["text"], "alice") || !strings.Contains(row["text"], "ship it") || !strings.Contains(row["text"], "writes need a human") {
		t.Errorf("dave's approval row: %v", row)
	}
	// Tenant scoping: eve, an approver of tenant t2, sees no approval of
	// t1 and cannot approve one (404, as the API answers).
	if err := chromedp.Do(eve, chromedp.Navigate(base+"/ui/approvals")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, eve, "eve's inbox loads", `document.getElementById("approvals-empty") !== null`, 10*time.Second)
	if s := js[int](t, eve, `fetch("/ui/api/v1/approvals/`+id+`/approve", {method: "POST", headers: {"X-CSRF-Token": document.body.dataset.csrf, "Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`); s != http.StatusNotFound {
		t.Errorf("eve (tenant t2) approving a t1 approval: %d, want 404", s)
	}
	// A POST without the CSRF token is refused 403, and changes nothing.
	if s := js[int](t, dave, `fetch("/ui/api/v1/approvals/`+id+`/approve", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`); s != http.StatusForbidden {
		t.Errorf("approve POST without the CSRF token: %d, want 403", s)
	}
	screenshot(t, dave, shots, "approvals")
	if err := chromedp.Do(dave, chromedp.SendKeys(chromedp.CSS("#approval-rows tr.approval input.reason"), "looks fine"),
		chromedp.Click(chromedp.CSS("#approval-rows tr.approval button.approve"))); err != nil {
		t.Fatal(err)
	}
	clicked := time.Now()
	select {
	case r := <-waiting:
		if r.err != nil || r.res.IsError {
			t.Fatalf("the waiting call after approval: %v %+v", r.err, r.res)
		}
		if txt := r.res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "ship it") {
			t.Errorf("the waiting call's result: %q", txt)
		}
		t.Logf("approval: the waiting MCP call returned %s after the click", time.Since(clicked).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting MCP call did not resume after the approval in the console")
	}
	waitJS(t, dave, "the console reports the approval", `document.getElementById("approvals-status").textContent.startsWith("Approved")`, 5*time.Second)

	// 5. Policy: the rules with their file:line, and the explain form.
	if err := chromedp.Do(dave, chromedp.Navigate(base+"/ui/policy"),
		chromedp.SendKeys(chromedp.CSS("#explain-principal"), "alice"),
		chromedp.SendKeys(chromedp.CSS("#explain-tool"), "mcp:up.secret"),
		chromedp.Click(chromedp.CSS("#explain-submit"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, dave, "the explanation", `document.getElementById("explain-result").dataset.status === "200"`, 5*time.Second)
	expl := js[string](t, dave, `document.getElementById("explain-result").textContent`)
	if !strings.Contains(expl, `"decision": "deny"`) || !strings.Contains(expl, "secret:read") {
		t.Errorf("explain alice on mcp:up.secret: %s", expl)
	}
	rules := js[string](t, dave, `document.getElementById("rules").textContent`)
	if !strings.Contains(rules, "writes-need-approval") || !strings.Contains(rules, "toolgate.yaml:") {
		t.Errorf("policy rules table: %q", rules)
	}
	screenshot(t, dave, shots, "policy")

	// 6. Sign-out ends the session: its cookie no longer reads the API.
	if err := chromedp.Do(alice, chromedp.Navigate(base+"/ui/catalog"), chromedp.Click(chromedp.CSS("#signout"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, alice, "signed out", `location.pathname === "/ui/signin"`, 5*time.Second)
	if s := js[int](t, alice, `fetch("/ui/api/v1/tools").then(r => r.status)`); s != http.StatusUnauthorized {
		t.Errorf("the API after sign-out: %d, want 401", s)
	}
	if t.Failed() {
		t.Logf("serve log:\n%s", logs())
	}
	t.Logf("browser scenarios: %s in all (%s after chromium started); screenshots in %s",
		time.Since(start).Round(time.Millisecond), time.Since(booted).Round(time.Millisecond), shots)
}
