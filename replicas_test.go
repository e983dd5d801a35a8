package toolgate_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/receipt"
)

// replicaBursts of the policy's rate limits (rate 1/h, so no token comes
// back while the test runs).
const (
	sharedBurst = 4 // mcp:up.limited, per principal_tool
	tenantBurst = 3 // mcp:up.budget, per tenant_tool
)

// replicaKeys are the API keys of the test's principals: alice and bob of
// tenant acme, carol of tenant globex, and approver (acme), who may
// approve and read the tenant's events.
var replicaKeys = map[string]string{
	"alice":    "tg_replicas_alice_0123456789abcdef",
	"bob":      "tg_replicas_bob_0123456789abcdef",
	"carol":    "tg_replicas_carol_0123456789abcdef",
	"approver": "tg_replicas_approver_0123456789abcdef",
}

// replica is one running `toolgate serve`.
type replica struct {
	name    string
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:PORT
	mcp     string // base + /mcp
	cfg     string // its config file
	chainID string // its receipt chain (the key id of its signing key)
}

// replicaSet is the deployment under test.
type replicaSet struct {
	a, b     *replica
	dsn      string
	upstream *countingUpstream
}

// countingUpstream is a go-sdk MCP server whose tools answer at once and
// count their runs by name.
type countingUpstream struct {
	url  string
	mu   sync.Mutex
	runs map[string]int
}

func (u *countingUpstream) ran(tool string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[tool]
}

func startCountingUpstream(t *testing.T) *countingUpstream {
	t.Helper()
	u := &countingUpstream{runs: map[string]int{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	for _, name := range []string{"echo", "limited", "budget", "gated", "work"} {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				u.mu.Lock()
				u.runs[name]++
				u.mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " ran"}}}, nil
			})
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// replicaPostgres creates a fresh schema on the test PostgreSQL
// (TOOLGATE_TEST_POSTGRES, by default the machine's 127.0.0.1:5432),
// dropped when t ends, and returns a DSN using it. It fails, never skips,
// when the server is missing.
func replicaPostgres(t *testing.T) string {
	t.Helper()
	admin := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required (set TOOLGATE_TEST_POSTGRES): %v", admin, err)
	}
	defer conn.Close(context.Background())
	schema := "tg_replicas_" + randomHex(t, 8)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// replicaRedis returns the test Redis (TOOLGATE_TEST_REDIS, by default
// redis://127.0.0.1:6379) and a key prefix of this test only, whose keys
// are deleted when t ends. It fails, never skips, when Redis is missing.
func replicaRedis(t *testing.T) (string, string) {
	t.Helper()
	rurl := os.Getenv("TOOLGATE_TEST_REDIS")
	if rurl == "" {
		rurl = "redis://127.0.0.1:6379"
	}
	opts, err := redis.ParseURL(rurl)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		rc.Close()
		t.Fatalf("Redis at %s is required (set TOOLGATE_TEST_REDIS): %v", rurl, err)
	}
	prefix := "toolgate-test:replicas:" + randomHex(t, 8) + ":"
	t.Cleanup(func() {
		defer rc.Close()
		ctx := context.Background()
		iter := rc.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rc.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("deleting the test's Redis keys: %v", err)
		}
	})
	return rurl, prefix
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeReplicaConfig writes replica name's config: its own listener (a
// free port) and signing key, the shared store, Redis and policy.
// approvalWait is its approvals.wait.
func writeReplicaConfig(t *testing.T, dir, name, dsn, redisURL, prefix, upstream, approvalWait string) string {
	t.Helper()
	cfg := filepath.Join(dir, name+".yaml")
	// The approvals' binding secret every replica shares (so that a call
	// approved through one replica is consumed by its retry on another).
	if secret := filepath.Join(dir, "binding.secret"); !fileExists(secret) {
		if err := os.WriteFile(secret, []byte(randomHex(t, 32)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
naming: {prefix: always}
store: {driver: postgres, dsn: %q}
ratelimit: {backend: redis, url: %q, key_prefix: %q}
signing: {key_file: %q}
approvals: {wait: %s, binding_secret: "{{credential:binding}}"}
credentials:
  binding: {file: %q}
auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: acme}
    - {id: bob, key_sha256: %q, tenant: acme}
    - {id: carol, key_sha256: %q, tenant: globex}
    - {id: approver, key_sha256: %q, tenant: acme, scopes: ["toolgate:approve", "toolgate:audit"]}
servers:
  - {name: up, url: %q, sessions: shared}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
    - {id: gated, effect: require_approval, tools: ["mcp:up.gated"]}
  ratelimits:
    - {tools: ["mcp:up.limited"], per: principal_tool, rate: 1/h, burst: %d}
    - {tools: ["mcp:up.budget"], per: tenant_tool, rate: 1/h, burst: %d}
`, dsn, redisURL, prefix, filepath.Join(dir, name+".key"), approvalWait, filepath.Join(dir, "binding.secret"),
		auth.HashKey(replicaKeys["alice"]), auth.HashKey(replicaKeys["bob"]), auth.HashKey(replicaKeys["carol"]),
		auth.HashKey(replicaKeys["approver"]), upstream, sharedBurst, tenantBurst), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startReplicas starts replicas A and B on one fresh PostgreSQL schema and
// one Redis prefix. A waits up to 30 s for an approval, B 1 s (so that a
// refused retry on B answers quickly).
func startReplicas(t *testing.T) *replicaSet {
	t.Helper()
	dsn := replicaPostgres(t)
	redisURL, prefix := replicaRedis(t)
	up := startCountingUpstream(t)
	dir := t.TempDir()
	rs := &replicaSet{dsn: dsn, upstream: up}
	start := func(name, wait string) *replica {
		cfg := writeReplicaConfig(t, dir, name, dsn, redisURL, prefix, up.url, wait)
		cmd, mcpURL := startServeChild(t, cfg)
		key, _, err := receipt.LoadOrCreateKey(filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return &replica{name: name, cmd: cmd, mcp: mcpURL, base: strings.TrimSuffix(mcpURL, "/mcp"), cfg: cfg,
			chainID: receipt.KeyID(key.Public().(ed25519.PublicKey))}
	}
	rs.a = start("A", "30s")
	rs.b = start("B", "1s")
	if rs.a.base == rs.b.base || rs.a.chainID == rs.b.chainID {
		t.Fatalf("replicas share a listener or a key: %s %s, chains %s %s", rs.a.base, rs.b.base, rs.a.chainID, rs.b.chainID)
	}
	return rs
}

// httpAnswer is the answer of POST /v1/calls: a call result (200) or the
// OpenWOP error envelope.
type httpAnswer struct {
	Status     int             `json:"-"` // the HTTP status
	RetryAfter string          `json:"-"` // the Retry-After header
	CallID     string          `json:"callId"`
	RunID      string          `json:"runId"`
	CallStatus string          `json:"status"`
	Outcome    json.RawMessage `json:"outcome"`
	ReceiptID  string          `json:"receiptId"`
	Code       string          `json:"error"`
	Message    string          `json:"message"`
	Details    map[string]any  `json:"details"`
}

// postCall makes one POST /v1/calls on r as principal and decodes the
// answer; a transport error is returned (for the kill test).
func postCall(ctx context.Context, r *replica, principal, toolID, runID string, args map[string]any) (httpAnswer, error) {
	body, _ := json.Marshal(map[string]any{"toolId": toolID, "args": args, "runId": runID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/v1/calls", bytes.NewReader(body))
	if err != nil {
		return httpAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+replicaKeys[principal])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpAnswer{}, err
	}
	var a httpAnswer
	// The envelope's "error" is a code string, a call's "error" an object:
	// decode the two shapes separately.
	if resp.StatusCode == http.StatusOK {
		var res struct {
			CallID    string          `json:"callId"`
			RunID     string          `json:"runId"`
			Status    string          `json:"status"`
			Outcome   json.RawMessage `json:"outcome"`
			ReceiptID string          `json:"receiptId"`
			Error     *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return httpAnswer{}, fmt.Errorf("POST /v1/calls on %s: %d %s: %v", r.name, resp.StatusCode, raw, err)
		}
		a = httpAnswer{CallID: res.CallID, RunID: res.RunID, CallStatus: res.Status, Outcome: res.Outcome, ReceiptID: res.ReceiptID}
		if res.Error != nil {
			a.Code = res.Error.Code
		}
	} else if err := json.Unmarshal(raw, &a); err != nil {
		return httpAnswer{}, fmt.Errorf("POST /v1/calls on %s: %d %s: %v", r.name, resp.StatusCode, raw, err)
	}
	a.Status = resp.StatusCode
	a.RetryAfter = resp.Header.Get("Retry-After")
	return a, nil
}

// mustCall is postCall that fails t on a transport error.
func mustCall(t *testing.T, r *replica, principal, toolID, runID string, args map[string]any) httpAnswer {
	t.Helper()
	a, err := postCall(t.Context(), r, principal, toolID, runID, args)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// connectMCP opens an MCP session on r as principal (the Go SDK's
// Streamable HTTP client); it is closed when t ends.
func connectMCP(t *testing.T, r *replica, principal string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "replicas-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: r.mcp,
		HTTPClient: &http.Client{Transport: bearerRT{key: replicaKeys[principal]}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("MCP session on %s as %s: %v", r.name, principal, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpErrorCode is the toolgate/error code of an isError result ("" for a
// success).
func mcpErrorCode(res *mcp.CallToolResult) string {
	if !res.IsError {
		return ""
	}
	e, _ := res.Meta["toolgate/error"].(map[string]any)
	code, _ := e["code"].(string)
	if code == "" {
		return "isError without toolgate/error"
	}
	return code
}

// apiJSON makes an authenticated request to r's /v1 API and decodes the
// JSON answer into out (when not nil), returning the status.
func apiJSON(t *testing.T, r *replica, principal, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, r.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+replicaKeys[principal])
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s on %s: %d %s: %v", method, path, r.name, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// pollUntil calls cond until it returns true, failing t after timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestTwoReplicas (issue 14 acceptance 2): two real `toolgate serve`
// processes on different 127.0.0.1 ports share one PostgreSQL schema and
// one Redis key prefix, each signing with its own key, and are driven
// over MCP (the Go SDK's Streamable HTTP client) and HTTP (/v1/calls) as
// one deployment behind a load balancer would be. The upstream is an
// in-process go-sdk server. The sub-tests run in order on the same two
// replicas, each on its own tools or runs.
func TestTwoReplicas(t *testing.T) {
	rs := startReplicas(t)
	t.Run("shared rate limit", func(t *testing.T) { testSharedRateLimit(t, rs) })
	t.Run("tenant_tool budget", func(t *testing.T) { testTenantBudget(t, rs) })
	t.Run("approval across replicas", func(t *testing.T) { testApprovalAcross(t, rs) })
	t.Run("event stream across replicas", func(t *testing.T) { testStreamAcross(t, rs) })
	t.Run("receipts verify two chains", func(t *testing.T) { testVerifyTwoChains(t, rs) })
	// It kills replica A: only the check of the chains it left follows.
	t.Run("kill -9 of a replica under load", func(t *testing.T) { testKillReplicaUnderLoad(t, rs) })
	t.Run("receipts verify two chains after the kill", func(t *testing.T) { verifyTwoChains(t, rs, rs.b.cfg) })
}

// (a) With burst N, N calls of one principal spread over both replicas
// (HTTP and MCP) succeed and the (N+1)-th is refused rate_limited on
// either replica: the bucket lives in Redis, not in a replica.
func testSharedRateLimit(t *testing.T, rs *replicaSet) {
	csA := connectMCP(t, rs.a, "alice")
	for i := range sharedBurst {
		r := []*replica{rs.a, rs.b}[i%2]
		if i == 2 { // one over MCP on A
			res, err := csA.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__limited", Arguments: map[string]any{}})
			if err != nil || mcpErrorCode(res) != "" {
				t.Fatalf("call %d (MCP on A) within the burst: %+v %v", i+1, res, err)
			}
			continue
		}
		if a := mustCall(t, r, "alice", "mcp:up.limited", "", map[string]any{}); a.Status != http.StatusOK || a.CallStatus != "ok" {
			t.Fatalf("call %d (HTTP on %s) within the burst: %+v", i+1, r.name, a)
		}
	}
	for _, r := range []*replica{rs.a, rs.b} {
		a := mustCall(t, r, "alice", "mcp:up.limited", "", map[string]any{})
		if a.Status != http.StatusTooManyRequests || a.Code != "rate_limited" || a.RetryAfter == "" || a.Details["per"] != "principal_tool" {
			t.Errorf("call %d on %s: %d %s %q (Retry-After %q); want 429 rate_limited per principal_tool with Retry-After", sharedBurst+1, r.name, a.Status, a.Code, a.Message, a.RetryAfter)
		}
	}
	res, err := csA.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__limited", Arguments: map[string]any{}})
	if err != nil || mcpErrorCode(res) != "rate_limited" {
		t.Errorf("MCP call past the shared burst on A: %+v %v; want isError rate_limited", res, err)
	}
	if n := rs.upstream.ran("limited"); n != sharedBurst {
		t.Errorf("the upstream ran limited %d times; want the burst, %d", n, sharedBurst)
	}
}

// (b) A per: tenant_tool budget is one bucket for every principal of a
// tenant, whichever replica they reach, and another tenant has its own.
func testTenantBudget(t *testing.T, rs *replicaSet) {
	calls := []struct {
		r         *replica
		principal string
	}{{rs.a, "alice"}, {rs.b, "bob"}, {rs.b, "alice"}}
	for i, c := range calls[:tenantBurst] {
		if a := mustCall(t, c.r, c.principal, "mcp:up.budget", "", map[string]any{}); a.Status != http.StatusOK || a.CallStatus != "ok" {
			t.Fatalf("tenant call %d (%s on %s) within the tenant budget: %+v", i+1, c.principal, c.r.name, a)
		}
	}
	for _, c := range []struct {
		r         *replica
		principal string
	}{{rs.a, "bob"}, {rs.b, "alice"}} {
		a := mustCall(t, c.r, c.principal, "mcp:up.budget", "", map[string]any{})
		if a.Status != http.StatusTooManyRequests || a.Code != "rate_limited" || a.Details["per"] != "tenant_tool" {
			t.Errorf("%s on %s past acme's budget: %d %s %v; want 429 rate_limited per tenant_tool", c.principal, c.r.name, a.Status, a.Code, a.Details)
		}
	}
	// carol (globex) has globex's whole budget, on both replicas.
	for i := range tenantBurst {
		r := []*replica{rs.b, rs.a}[i%2]
		if a := mustCall(t, r, "carol", "mcp:up.budget", "", map[string]any{}); a.Status != http.StatusOK || a.CallStatus != "ok" {
			t.Fatalf("carol's call %d on %s (another tenant): %+v", i+1, r.name, a)
		}
	}
	if a := mustCall(t, rs.a, "carol", "mcp:up.budget", "", map[string]any{}); a.Status != http.StatusTooManyRequests || a.Code != "rate_limited" {
		t.Errorf("carol past globex's budget: %d %s; want 429 rate_limited", a.Status, a.Code)
	}
	if n := rs.upstream.ran("budget"); n != 2*tenantBurst {
		t.Errorf("the upstream ran budget %d times; want %d (two tenants' budgets)", n, 2*tenantBurst)
	}
}

// approvalView is an approval of GET /v1/approvals.
type approvalView struct {
	ID          string `json:"id"`
	Principal   string `json:"principal"`
	ToolID      string `json:"toolId"`
	ArgsSummary string `json:"argsSummary"`
	Status      string `json:"status"`
}

func listApprovals(t *testing.T, r *replica, status string) []approvalView {
	t.Helper()
	var out struct {
		Approvals []approvalView `json:"approvals"`
	}
	if code := apiJSON(t, r, "approver", http.MethodGet, "/v1/approvals?status="+status, nil, &out); code != http.StatusOK {
		t.Fatalf("GET /v1/approvals on %s: %d", r.name, code)
	}
	return out.Approvals
}

// (c) A call waiting for approval on A resumes when the approver approves
// it through B's API, within the 1 s (asserted with a margin: 3 s);
// the approval is consumed by that call, so the same call retried on B
// does not run on it.
func testApprovalAcross(t *testing.T, rs *replicaSet) {
	cs := connectMCP(t, rs.a, "alice")
	args := map[string]any{"item": "report-7"}
	type result struct {
		res *mcp.CallToolResult
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__gated", Arguments: args})
		done <- result{res, err, time.Now()}
	}()
	var pending approvalView
	pollUntil(t, 20*time.Second, "the approval requested on A to appear in B's inbox", func() bool {
		for _, a := range listApprovals(t, rs.b, "pending") {
			if a.Principal == "alice" && a.ToolID == "mcp:up.gated" {
				pending = a
				return true
			}
		}
		return false
	})
	if n := rs.upstream.ran("gated"); n != 0 {
		t.Fatalf("the gated tool ran %d times before the approval", n)
	}
	// Latencies are measured from the start of the approving request (the
	// call may resume before its answer arrives): an upper bound.
	approved := time.Now()
	if code := apiJSON(t, rs.b, "approver", http.MethodPost, "/v1/approvals/"+pending.ID+"/approve", map[string]any{"reason": "ok from B"}, nil); code != http.StatusOK {
		t.Fatalf("approve %s on B: %d", pending.ID, code)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call on A did not resume within 20 s of the approval on B")
	}
	latency := r.at.Sub(approved)
	t.Logf("approve request on B → the MCP call on A returned: %s", latency)
	if r.err != nil || mcpErrorCode(r.res) != "" {
		t.Fatalf("the approved call on A: %+v %v", r.res, r.err)
	}
	if got, _ := r.res.Meta["toolgate/runId"].(string); got == "" {
		t.Errorf("the approved call's result has no toolgate/runId: %v", r.res.Meta)
	}
	if latency > 3*time.Second {
		t.Errorf("the call on A resumed %s after the approval on B; the issue wants within 1 s (asserted: 3 s)", latency)
	}
	if n := rs.upstream.ran("gated"); n != 1 {
		t.Fatalf("the gated tool ran %d times after one approval; want 1", n)
	}
	consumed := false
	for _, a := range listApprovals(t, rs.b, "consumed") {
		consumed = consumed || a.ID == pending.ID
	}
	if !consumed {
		t.Errorf("approval %s is not listed as consumed on B", pending.ID)
	}
	// The same call retried on B: the approval is spent, so it does not
	// run; B asks for a new approval and gives up after its wait (1 s).
	a := mustCall(t, rs.b, "alice", "mcp:up.gated", "", args)
	if a.Code != "approval_required" || a.Details["approvalId"] == pending.ID {
		t.Errorf("retry on B of the call approved by %s: %d %s %v; want approval_required for a new approval", pending.ID, a.Status, a.Code, a.Details)
	}
	if code := apiJSON(t, rs.b, "approver", http.MethodPost, "/v1/approvals/"+pending.ID+"/approve", map[string]any{}, nil); code != http.StatusConflict {
		t.Errorf("approving the consumed approval %s again on B: %d; want 409", pending.ID, code)
	}
	if n := rs.upstream.ran("gated"); n != 1 {
		t.Errorf("the gated tool ran %d times after the retry on B; want 1", n)
	}

	// The operator's CLI, with B's config, approves a call waiting on A
	// (here over HTTP) just the same.
	args = map[string]any{"item": "report-8"}
	type httpResult struct {
		a   httpAnswer
		err error
		at  time.Time
	}
	httpDone := make(chan httpResult, 1)
	go func() {
		a, err := postCall(t.Context(), rs.a, "alice", "mcp:up.gated", "", args)
		httpDone <- httpResult{a, err, time.Now()}
	}()
	var second approvalView
	pollUntil(t, 20*time.Second, "the second approval requested on A to appear in B's inbox", func() bool {
		for _, a := range listApprovals(t, rs.b, "pending") {
			if a.Principal == "alice" && a.ToolID == "mcp:up.gated" && strings.Contains(a.ArgsSummary, "report-8") {
				second = a
				return true
			}
		}
		return false
	})
	var out, errOut bytes.Buffer
	approved = time.Now()
	if code := cli.Main(t.Context(), []string{"approvals", "approve", second.ID, "--config", rs.b.cfg, "--tenant", "acme", "--as", "approver"},
		strings.NewReader(""), &out, &errOut); code != cli.ExitOK {
		t.Fatalf("toolgate approvals approve %s --config B: %d %q %q", second.ID, code, out.String(), errOut.String())
	}
	var hr httpResult
	select {
	case hr = <-httpDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the HTTP call on A did not resume within 20 s of the CLI approval")
	}
	latency = hr.at.Sub(approved)
	t.Logf("CLI approve (B's config, opens the store) → the HTTP call on A returned: %s", latency)
	if hr.err != nil || hr.a.Status != http.StatusOK || hr.a.CallStatus != "ok" {
		t.Fatalf("the call on A approved by the CLI: %+v %v", hr.a, hr.err)
	}
	if latency > 3*time.Second {
		t.Errorf("the call on A resumed %s after the CLI approval; the issue wants within 1 s (asserted: 3 s)", latency)
	}
	if n := rs.upstream.ran("gated"); n != 2 {
		t.Errorf("the gated tool ran %d times after two approvals; want 2", n)
	}

	// A call that gave up waiting on B (its wait is 1 s) and was approved
	// afterwards through A is run by its retry on A, which consumes that
	// approval (the replicas share approvals.binding_secret); a further
	// retry asks anew.
	args = map[string]any{"item": "report-9"}
	gaveUp := mustCall(t, rs.b, "alice", "mcp:up.gated", "", args)
	third, _ := gaveUp.Details["approvalId"].(string)
	if gaveUp.Code != "approval_required" || third == "" {
		t.Fatalf("the call on B without an approver: %d %s %v; want approval_required with an approvalId", gaveUp.Status, gaveUp.Code, gaveUp.Details)
	}
	if code := apiJSON(t, rs.a, "approver", http.MethodPost, "/v1/approvals/"+third+"/approve", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("approve %s on A: %d", third, code)
	}
	if retry := mustCall(t, rs.a, "alice", "mcp:up.gated", "", args); retry.Status != http.StatusOK || retry.CallStatus != "ok" {
		t.Fatalf("the retry on A of the call approved through A after B gave up: %d %s %v", retry.Status, retry.Code, retry.Details)
	}
	if n := rs.upstream.ran("gated"); n != 3 {
		t.Errorf("the gated tool ran %d times after three approvals; want 3", n)
	}
	again := mustCall(t, rs.b, "alice", "mcp:up.gated", "", args)
	if again.Code != "approval_required" || again.Details["approvalId"] == third {
		t.Errorf("a second retry of the consumed approval %s: %d %s %v; want approval_required for a new approval", third, again.Status, again.Code, again.Details)
	}
}

// (e) `toolgate receipts verify --config` verifies every chain in the
// shared store and reports each: here two, A's and B's, verified.
func testVerifyTwoChains(t *testing.T, rs *replicaSet) { verifyTwoChains(t, rs, rs.a.cfg) }

// verifyTwoChains runs `toolgate receipts verify --config cfg` (either
// replica's file: the store is shared) and checks that it reports A's and
// B's chains, each verified.
func verifyTwoChains(t *testing.T, rs *replicaSet, cfg string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(t.Context(), []string{"receipts", "verify", "--config", cfg}, strings.NewReader(""), &out, &errOut)
	t.Logf("receipts verify --config:\n%s%s", out.String(), errOut.String())
	if code != cli.ExitOK || strings.Contains(out.String(), "FAILED") {
		t.Fatalf("receipts verify --config: exit %d; want 0 with two verified chains", code)
	}
	if !strings.Contains(out.String(), "in 2 chain(s), every chain verified") {
		t.Errorf("receipts verify --config does not report two verified chains")
	}
	for _, r := range []*replica{rs.a, rs.b} {
		if !strings.Contains(out.String(), "chain "+r.chainID+": verified") {
			t.Errorf("receipts verify --config does not report %s's chain %s as verified", r.name, r.chainID)
		}
	}
}

// (f) Replica A is killed with SIGKILL while several goroutines call both
// replicas. Every call either replica acknowledged (a 200 answer) has its
// agent.toolCalled, its agent.toolReturned and its receipt in PostgreSQL,
// and B goes on serving (HTTP and MCP) after the kill.
func testKillReplicaUnderLoad(t *testing.T, rs *replicaSet) {
	const workers = 3    // per replica
	const maxCalls = 300 // per worker: the load is bounded
	const killAfter = 30 // calls A acknowledged before the kill
	const afterKill = 10 // calls each B worker makes after the kill
	type ack struct{ callID, receiptID, replica string }
	var (
		mu       sync.Mutex
		acked    []ack
		ackedA   atomic.Int64
		killing  = make(chan struct{}) // closed just before the SIGKILL
		killed   = make(chan struct{})
		enoughA  = make(chan struct{})
		enoughMu sync.Once
		wg       sync.WaitGroup
		failures = make(chan string, 2*workers)
	)
	worker := func(r *replica, w int) {
		defer wg.Done()
		runID := fmt.Sprintf("run_replicas_load_%s%d", r.name, w)
		sinceKill := -1
		for i := range maxCalls {
			select {
			case <-killed:
				if sinceKill < 0 {
					sinceKill = 0
				}
			default:
			}
			a, err := postCall(context.WithoutCancel(t.Context()), r, "alice", "mcp:up.work", runID, map[string]any{"w": w, "i": i})
			if err != nil || a.Status != http.StatusOK || a.CallStatus != "ok" {
				select {
				case <-killing:
					if r == rs.a && err != nil {
						return // A is gone: its unanswered call was not acknowledged
					}
				default:
				}
				failures <- fmt.Sprintf("call %d of worker %s%d: %+v %v", i, r.name, w, a, err)
				return
			}
			mu.Lock()
			acked = append(acked, ack{a.CallID, a.ReceiptID, r.name})
			mu.Unlock()
			if r == rs.a && ackedA.Add(1) == killAfter {
				enoughMu.Do(func() { close(enoughA) })
			}
			if sinceKill >= 0 {
				if sinceKill++; sinceKill >= afterKill && r == rs.b {
					return
				}
			}
		}
		if r == rs.b {
			failures <- fmt.Sprintf("worker B%d made %d calls and never saw the kill", w, maxCalls)
		}
	}
	for w := range workers {
		wg.Add(2)
		go worker(rs.a, w)
		go worker(rs.b, w)
	}
	select {
	case <-enoughA:
	case <-time.After(30 * time.Second):
		t.Fatalf("A acknowledged only %d calls in 30 s", ackedA.Load())
	}
	close(killing)
	rs.a.cmd.Process.Signal(syscall.SIGKILL)
	rs.a.cmd.Wait()
	close(killed)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		return
	}
	byReplica := map[string]int{}
	for _, a := range acked {
		byReplica[a.replica]++
	}
	t.Logf("acknowledged calls: %d on A (killed under load), %d on B", byReplica["A"], byReplica["B"])

	// B keeps serving, over MCP too.
	cs := connectMCP(t, rs.b, "bob")
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__work", Arguments: map[string]any{"after": "kill"}}); err != nil || mcpErrorCode(res) != "" {
		t.Fatalf("an MCP call on B after A's kill: %+v %v", res, err)
	}

	// Every acknowledged call is in PostgreSQL: both events and a receipt.
	conn, err := pgx.Connect(t.Context(), rs.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	types := map[string]map[string]bool{} // callId → event types
	rows, err := conn.Query(t.Context(), `SELECT convert_from(payload, 'UTF8')::jsonb->>'callId', type FROM events WHERE tenant = 'acme' AND type IN ($1, $2)`,
		audit.TypeToolCalled, audit.TypeToolReturned)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var callID *string
		var typ string
		if err := rows.Scan(&callID, &typ); err != nil {
			t.Fatal(err)
		}
		if callID == nil {
			continue
		}
		if types[*callID] == nil {
			types[*callID] = map[string]bool{}
		}
		types[*callID][typ] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	receipts := map[string]string{} // receiptId → callId
	rows, err = conn.Query(t.Context(), `SELECT receipt_id, convert_from(body, 'UTF8')::jsonb->>'callId' FROM receipts WHERE tenant = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, callID string
		if err := rows.Scan(&id, &callID); err != nil {
			t.Fatal(err)
		}
		receipts[id] = callID
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, a := range acked {
		if !types[a.callID][audit.TypeToolCalled] || !types[a.callID][audit.TypeToolReturned] || receipts[a.receiptID] != a.callID {
			lost++
			if lost <= 5 {
				t.Errorf("call %s acknowledged by %s: toolCalled %v, toolReturned %v, receipt %s for call %q",
					a.callID, a.replica, types[a.callID][audit.TypeToolCalled], types[a.callID][audit.TypeToolReturned], a.receiptID, receipts[a.receiptID])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged calls are not wholly in PostgreSQL", lost, len(acked))
	}
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
