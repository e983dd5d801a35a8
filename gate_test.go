package toolgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
)

func mustPolicy(t testing.TB, src string) *policy.Program {
	t.Helper()
	spec, err := policy.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatalf("compile policy: %v", err)
	}
	return prog
}

// harness is a gateway with an in-memory log and a counting echo tool.
type harness struct {
	gw      *toolgate.Gateway
	log     *audit.MemoryLog
	invoked atomic.Int64
}

func newHarness(t *testing.T, prog *policy.Program, hooks ...hook.Registration) *harness {
	t.Helper()
	h := &harness{log: audit.NewMemoryLog()}
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Events: h.log, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	h.gw = gw
	echo := func(ctx context.Context, args json.RawMessage) (any, error) {
		h.invoked.Add(1)
		return json.RawMessage(args), nil
	}
	for _, d := range []catalog.ToolDescriptor{
		{ToolID: "native:text.echo", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure},
		{ToolID: "native:files.write", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite, Auth: &catalog.Auth{Scopes: []string{"files:write"}}},
	} {
		if err := gw.RegisterNative(d, echo); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

var alice = toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"files:write"}}

// events returns the run's events, checking pairing and sequence numbering.
func (h *harness) events(t *testing.T, runID string) []audit.Event {
	t.Helper()
	evs := h.log.Events("acme", runID)
	for i, e := range evs {
		if e.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
	}
	return evs
}

// returned decodes the run's agent.toolReturned payload.
func returnedPayload(t *testing.T, evs []audit.Event) map[string]any {
	t.Helper()
	for _, e := range evs {
		if e.Type == audit.TypeToolReturned {
			var m map[string]any
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no agent.toolReturned in %d events", len(evs))
	return nil
}

// verifyReceipts exports the receipts and verifies them offline.
func verifyReceipts(t *testing.T, gw *toolgate.Gateway) []*receipt.Receipt {
	t.Helper()
	var buf bytes.Buffer
	if err := gw.WriteReceipts(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(bytes.NewReader(buf.Bytes()), gw.PublicKey(), receipt.VerifyOptions{}); err != nil {
		t.Fatalf("receipts do not verify: %v\n%s", err, buf.String())
	}
	var out []*receipt.Receipt
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.HasPrefix(line, `{"checkpoint":`) {
			continue
		}
		var r receipt.Receipt
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, &r)
	}
	return out
}

func TestAllowedCallRecordsPairAndReceipt(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `
rules:
  - {id: all, effect: allow, tools: ["native:*"]}
`))
	res, err := h.gw.Call(context.Background(), toolgate.Call{Tool: "text.echo", Args: json.RawMessage(`{"q":"openwop"}`), Principal: alice, RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != audit.StatusOK || string(res.Output) != `{"q":"openwop"}` || !res.Ran {
		t.Fatalf("result = %+v", res)
	}
	if res.RequestedArgsHash != "9458af8c77ede919beb4dd201de70ea7909225488c9e925190a9b4e585cb9d6f" {
		t.Errorf("argsHash = %s", res.RequestedArgsHash)
	}
	evs := h.events(t, "run-1")
	if len(evs) != 2 || evs[0].Type != audit.TypeToolCalled || evs[1].Type != audit.TypeToolReturned || evs[1].CausationID != evs[0].EventID {
		t.Fatalf("events = %+v", evs)
	}
	ret := returnedPayload(t, evs)
	if ret["status"] != "ok" || ret["durationMs"] == nil || ret["error"] != nil {
		t.Errorf("toolReturned = %v", ret)
	}
	rs := verifyReceipts(t, h.gw)
	if len(rs) != 1 || rs[0].Status != "ok" || rs[0].CallID != res.CallID || rs[0].Decision.RuleID != "all" || rs[0].ReceiptID != res.ReceiptID {
		t.Fatalf("receipts = %+v", rs)
	}
	// The receipt carries the digest of the native tool's declared
	// definition (issue 17 §3).
	ds := h.gw.Disclose(context.Background(), alice)
	i := slices.IndexFunc(ds, func(d catalog.ToolDescriptor) bool { return d.ToolID == "native:text.echo" })
	if i < 0 {
		t.Fatalf("native:text.echo not disclosed: %+v", ds)
	}
	want, err := catalog.DefinitionDigest(catalog.DescriptorDefinition(&ds[i]))
	if err != nil || rs[0].ToolDigest != want {
		t.Fatalf("receipt toolDigest = %q, want %q (%v)", rs[0].ToolDigest, want, err)
	}
}

// TestFailClosed: every failure of the gate's own machinery denies, the tool
// never runs, and the denial is still recorded (toolReturned forbidden without
// durationMs, plus a receipt).
func TestFailClosed(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	// enforceWithin registers an enforce hook with the given timeout; the
	// timeout cases use a short one, the others (which answer at once) a
	// generous one, so that a loaded machine does not turn their verdict
	// into a timeout.
	enforceWithin := func(timeout time.Duration, name string, before func(ctx context.Context, c *hook.Call) (hook.Verdict, error)) []hook.Registration {
		return []hook.Registration{{Name: name, Mode: hook.Enforce, Timeout: timeout, Hook: hook.Funcs{BeforeFunc: before}}}
	}
	enforce := func(name string, before func(ctx context.Context, c *hook.Call) (hook.Verdict, error)) []hook.Registration {
		return enforceWithin(10*time.Second, name, before)
	}
	allowAll := `
rules:
  - {id: all, effect: allow, tools: ["*"]}
`
	cases := []struct {
		name   string
		policy *policy.Program
		hooks  []hook.Registration
		args   string
		code   errcode.Code
		reason string
	}{
		{name: "no policy", policy: nil, code: errcode.Forbidden, reason: "no policy"},
		{name: "CEL runtime error", policy: mustPolicy(t, `
rules:
  - {id: all, effect: allow, tools: ["*"]}
  - {id: big, effect: deny, tools: ["*"], when: 'args.n > 3'}
`), args: `{"n":"not a number"}`, code: errcode.Forbidden, reason: "big"},
		{name: "CEL cost exceeded", policy: func() *policy.Program {
			spec, err := policy.Parse("cost.yaml", []byte(`
rules:
  - {id: all, effect: allow, tools: ["*"], when: 'args.items.all(x, args.items.all(y, x != y || x == y))'}
`))
			if err != nil {
				t.Fatal(err)
			}
			p, err := policy.Compile(spec, policy.Options{CostLimit: 100})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}(), args: `{"items":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`, code: errcode.Forbidden, reason: "all"},
		{name: "enforce hook error", policy: mustPolicy(t, allowAll), hooks: enforce("err", func(context.Context, *hook.Call) (hook.Verdict, error) {
			return hook.Verdict{}, errors.New("policy engine unreachable")
		}), code: errcode.Forbidden, reason: "hook err failed"},
		{name: "enforce hook panic", policy: mustPolicy(t, allowAll), hooks: enforce("boom", func(context.Context, *hook.Call) (hook.Verdict, error) {
			panic("nil map")
		}), code: errcode.Forbidden, reason: "panicked"},
		{name: "enforce hook timeout (honours ctx)", policy: mustPolicy(t, allowAll), hooks: enforceWithin(20*time.Millisecond, "slow", func(ctx context.Context, _ *hook.Call) (hook.Verdict, error) {
			<-ctx.Done()
			return hook.Verdict{}, ctx.Err()
		}), code: errcode.Forbidden, reason: "hook slow"},
		{name: "enforce hook timeout (ignores ctx)", policy: mustPolicy(t, allowAll), hooks: enforceWithin(20*time.Millisecond, "stuck", func(context.Context, *hook.Call) (hook.Verdict, error) {
			<-block
			return hook.Verdict{}, nil
		}), code: errcode.Forbidden, reason: "deadline exceeded"},
		{name: "non-mutating hook changes args", policy: mustPolicy(t, allowAll), hooks: enforce("sneaky", func(context.Context, *hook.Call) (hook.Verdict, error) {
			return hook.Verdict{Args: json.RawMessage(`{"q":"other"}`)}, nil
		}), code: errcode.Forbidden, reason: "not declared mutating"},
		{name: "hook denies", policy: mustPolicy(t, allowAll), hooks: enforce("guard", func(context.Context, *hook.Call) (hook.Verdict, error) {
			return hook.Verdict{Deny: true, Reason: "outside business hours"}, nil
		}), code: errcode.Forbidden, reason: "outside business hours"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.policy, tc.hooks...)
			args := tc.args
			if args == "" {
				args = `{}`
			}
			res, err := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(args), Principal: alice, RunID: "r"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != audit.StatusForbidden || res.Err == nil || res.Err.Code != tc.code {
				t.Fatalf("result = %+v, want forbidden/%s", res, tc.code)
			}
			if !strings.Contains(res.Err.Message, tc.reason) && !strings.Contains(res.Decision.RuleID, tc.reason) {
				t.Errorf("message %q (rule %q) does not mention %q", res.Err.Message, res.Decision.RuleID, tc.reason)
			}
			if n := h.invoked.Load(); n != 0 {
				t.Fatalf("tool invoked %d times", n)
			}
			ret := returnedPayload(t, h.events(t, "r"))
			if ret["status"] != "forbidden" {
				t.Errorf("toolReturned status = %v", ret["status"])
			}
			if _, ok := ret["durationMs"]; ok {
				t.Errorf("forbidden toolReturned carries durationMs: %v", ret)
			}
			rs := verifyReceipts(t, h.gw)
			if len(rs) != 1 || rs[0].Status != "forbidden" || rs[0].DurationMs != nil || rs[0].Error == nil {
				t.Fatalf("receipts = %+v", rs)
			}
		})
	}
}

func TestObserveHookCannotDenyOrMutate(t *testing.T) {
	var seen atomic.Int64
	obs := hook.Registration{Name: "siem", Mode: hook.Observe, Hook: hook.Funcs{
		BeforeFunc: func(context.Context, *hook.Call) (hook.Verdict, error) {
			seen.Add(1)
			return hook.Verdict{Deny: true, Args: json.RawMessage(`{"x":1}`)}, errors.New("ignored")
		},
		AfterFunc: func(context.Context, *hook.Call, *hook.Outcome) error { seen.Add(1); return errors.New("ignored") },
	}}
	h := newHarness(t, mustPolicy(t, "rules: [{id: all, effect: allow, tools: ['*']}]"), obs)
	res, err := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(`{"q":1}`), Principal: alice})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != audit.StatusOK || string(res.Output) != `{"q":1}` || seen.Load() != 2 {
		t.Fatalf("result = %+v, hook calls %d", res, seen.Load())
	}
}

// A mutating enforce hook's arguments are re-decided: the new args hit a
// deny rule. With harmless new args the call runs with them and the receipt
// records both hashes and the mutationSource.
func TestMutatingHookRedecides(t *testing.T) {
	prog := mustPolicy(t, `
rules:
  - {id: all, effect: allow, tools: ["*"]}
  - {id: no-etc, effect: deny, tools: ["*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
`)
	newPath := "/etc/shadow"
	mut := hook.Registration{Name: "rewrite", Mode: hook.Enforce, Mutating: true, Hook: hook.Funcs{
		BeforeFunc: func(_ context.Context, c *hook.Call) (hook.Verdict, error) {
			return hook.Verdict{Args: json.RawMessage(`{"path":"` + newPath + `"}`)}, nil
		},
	}}
	h := newHarness(t, prog, mut)
	res, _ := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(`{"path":"/tmp/a"}`), Principal: alice})
	if res.Status != audit.StatusForbidden || res.Decision.RuleID != "no-etc" || h.invoked.Load() != 0 {
		t.Fatalf("mutated to /etc: result %+v", res)
	}
	newPath = "/tmp/b"
	res, _ = h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(`{"path":"/tmp/a"}`), Principal: alice})
	if res.Status != audit.StatusOK || string(res.Output) != `{"path":"/tmp/b"}` {
		t.Fatalf("result %+v", res)
	}
	if res.RequestedArgsHash == res.ExecutedArgsHash || res.MutationSource != "hook:rewrite" {
		t.Fatalf("hashes %s %s source %q", res.RequestedArgsHash, res.ExecutedArgsHash, res.MutationSource)
	}
	rs := verifyReceipts(t, h.gw)
	if last := rs[len(rs)-1]; last.MutationSource != "hook:rewrite" || last.RequestedArgsHash == last.ExecutedArgsHash {
		t.Fatalf("receipt %+v", last)
	}
}

// Tool failures propagate unchanged as status error; timeouts too.
func TestToolFailureHonesty(t *testing.T) {
	h := newHarness(t, mustPolicy(t, "rules: [{id: all, effect: allow, tools: ['*']}]"))
	fail := func(ctx context.Context, args json.RawMessage) (any, error) {
		return nil, errors.New("disk full")
	}
	if err := h.gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:files.fail", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}, fail); err != nil {
		t.Fatal(err)
	}
	panicky := func(ctx context.Context, args json.RawMessage) (any, error) { panic("index out of range") }
	if err := h.gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:files.panic", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}, panicky); err != nil {
		t.Fatal(err)
	}
	coded := func(ctx context.Context, args json.RawMessage) (any, error) {
		return nil, errcode.New(errcode.UpstreamUnavailable, "fs server restarting")
	}
	if err := h.gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:files.down", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}, coded); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool, code, msg string
	}{
		{"native:files.fail", "tool_execution_failed", "disk full"},
		{"native:files.panic", "tool_execution_failed", "index out of range"},
		{"native:files.down", "upstream_unavailable", "fs server restarting"},
	} {
		res, err := h.gw.Call(context.Background(), toolgate.Call{Tool: tc.tool, Principal: alice, RunID: tc.tool})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != audit.StatusError || string(res.Err.Code) != tc.code || !strings.Contains(res.Err.Message, tc.msg) {
			t.Fatalf("%s: %+v", tc.tool, res)
		}
		ret := returnedPayload(t, h.events(t, tc.tool))
		errObj, _ := ret["error"].(map[string]any)
		if ret["status"] != "error" || errObj["code"] != tc.code || ret["outcome"] != nil {
			t.Errorf("%s: toolReturned %v", tc.tool, ret)
		}
	}
	verifyReceipts(t, h.gw)
}

func TestRateLimitRefusesBurstPlusOne(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `
rules: [{id: all, effect: allow, tools: ['*']}]
ratelimits: [{tools: ["native:text.*"], per: principal_tool, rate: 1/h, burst: 3}]
`))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, _ := h.gw.Call(ctx, toolgate.Call{Tool: "native:text.echo", Principal: alice})
		if res.Status != audit.StatusOK {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	res, _ := h.gw.Call(ctx, toolgate.Call{Tool: "native:text.echo", Principal: alice, RunID: "limited"})
	if res.Status != audit.StatusRateLimited || res.Err.Code != errcode.RateLimited || res.RetryAfter <= 0 || h.invoked.Load() != 3 {
		t.Fatalf("4th call: %+v (invoked %d)", res, h.invoked.Load())
	}
	if res.Err.Details["scope"] != "tool" {
		t.Errorf("details %v", res.Err.Details)
	}
	ret := returnedPayload(t, h.events(t, "limited"))
	if ret["status"] != "rate_limited" || ret["durationMs"] != nil {
		t.Errorf("toolReturned %v", ret)
	}
	// Another principal has its own bucket.
	bob := toolgate.Principal{ID: "bob", Tenant: "acme"}
	if res, _ := h.gw.Call(ctx, toolgate.Call{Tool: "native:text.echo", Principal: bob}); res.Status != audit.StatusOK {
		t.Fatalf("bob: %+v", res)
	}
}

// Authorization runs before the rate limit: a forbidden call does not
// consume a token.
func TestAuthorizationBeforeRateLimit(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `
rules: [{id: all, effect: allow, tools: ['*']}]
ratelimits: [{tools: ["*"], per: principal_tool, rate: 1/h, burst: 1}]
`))
	ctx := context.Background()
	nobody := toolgate.Principal{ID: "eve", Tenant: "acme"} // lacks files:write
	for i := 0; i < 3; i++ {
		res, _ := h.gw.Call(ctx, toolgate.Call{Tool: "native:files.write", Principal: nobody})
		if res.Status != audit.StatusForbidden {
			t.Fatalf("call %d: %+v", i, res)
		}
		if got := res.Err.Details["requiredScopes"]; got == nil {
			t.Errorf("no requiredScopes in %v", res.Err.Details)
		}
	}
	if h.invoked.Load() != 0 {
		t.Fatal("tool ran")
	}
}

func TestUnknownAndAmbiguousToolsAreErrors(t *testing.T) {
	h := newHarness(t, mustPolicy(t, "rules: [{id: all, effect: allow, tools: ['*']}]"))
	_, err := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:nope", Principal: alice})
	if !errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Fatalf("err = %v", err)
	}
	_, err = h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(`[1]`), Principal: alice})
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
		t.Fatalf("array args: err = %v", err)
	}
	_, err = h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Args: json.RawMessage(`{"a":`), Principal: alice})
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
		t.Fatalf("truncated args: err = %v", err)
	}
	if h.invoked.Load() != 0 {
		t.Fatal("tool ran")
	}
}

// Secrets in arguments never reach events or receipts.
func TestSecretsNeverRecorded(t *testing.T) {
	red := audit.NewRedactor()
	red.AddSecret("gh-token", "ghp_live_0123456789abcdef")
	log := audit.NewMemoryLog()
	gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(t, "rules: [{id: all, effect: allow, tools: ['*']}]"), Events: log, Redactor: red, AuditContent: "full"})
	if err != nil {
		t.Fatal(err)
	}
	fail := func(ctx context.Context, args json.RawMessage) (any, error) {
		return nil, errors.New("auth failed for token ghp_live_0123456789abcdef")
	}
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:gh.call", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}, fail); err != nil {
		t.Fatal(err)
	}
	res, _ := gw.Call(context.Background(), toolgate.Call{Tool: "native:gh.call", Principal: alice, RunID: "s",
		Args: json.RawMessage(`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","note":"use ghp_live_0123456789abcdef"}`)})
	var buf bytes.Buffer
	for _, e := range log.Events("acme", "s") {
		b, _ := json.Marshal(e)
		buf.Write(b)
	}
	gw.WriteReceipts(&buf)
	b, _ := json.Marshal(res)
	buf.Write(b)
	for _, secret := range []string{"sk-canary-rfc0064-do-not-leak-xyz789", "ghp_live_0123456789abcdef"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("secret %q leaked:\n%s", secret, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "[REDACTED:gh-token]") {
		t.Errorf("no [REDACTED:gh-token] marker:\n%s", buf.String())
	}
}
