package approval_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
	"github.com/toolgate/toolgate/store/sqlite"
)

const approvalPolicy = `
default: deny
rules:
  - {id: writers, effect: allow, tools: ["native:fs.write"]}
  - {id: big-writes, effect: require_approval, tools: ["native:fs.write"], when: 'has(args.content) && size(args.content) > 10', reason: "large writes need a human"}
`

var (
	alice = toolgate.Principal{ID: "alice", Tenant: "acme"}
	bob   = toolgate.Principal{ID: "bob", Tenant: "acme", Scopes: []string{"toolgate:approve"}}
)

func compile(t *testing.T, src string) *policy.Program {
	t.Helper()
	spec, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// requests is an audit log that also reports each approval request.
type requests struct {
	audit.Log
	ids chan string
}

func (r *requests) Append(ctx context.Context, evs ...*audit.Event) error {
	if err := r.Log.Append(ctx, evs...); err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Type == approval.TypeRequested {
			var p struct {
				ApprovalID string `json:"approvalId"`
			}
			json.Unmarshal(ev.Payload, &p)
			r.ids <- p.ApprovalID
		}
	}
	return nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }
func bigArgs(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"content": s})
	return b
}
func code(r *toolgate.Result) errcode.Code {
	if r.Err == nil {
		return ""
	}
	return r.Err.Code
}

type rig struct {
	gw   *toolgate.Gateway
	mgr  *approval.Manager
	reqs *requests
	ran  atomic.Int64
	clk  *clock
	st   store.Approvals
}

func newRig(t *testing.T, st store.Approvals, wait time.Duration) *rig {
	t.Helper()
	r := &rig{clk: newClock(), st: st}
	r.reqs = &requests{Log: audit.NewMemoryLog(), ids: make(chan string, 16)}
	mgr, err := approval.New(approval.Options{Store: st, Events: r.reqs, TTL: time.Hour, Wait: wait, Now: r.clk.Now,
		BindingKey: []byte("test binding key")})
	if err != nil {
		t.Fatal(err)
	}
	r.mgr = mgr
	gw, err := toolgate.New(toolgate.Options{Policy: compile(t, approvalPolicy), Approver: mgr, Events: r.reqs})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:fs.write", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
		func(context.Context, json.RawMessage) (any, error) {
			r.ran.Add(1)
			return map[string]bool{"ok": true}, nil
		}); err != nil {
		t.Fatal(err)
	}
	r.gw = gw
	return r
}

func (r *rig) call(t *testing.T, args json.RawMessage) *toolgate.Result {
	t.Helper()
	res, err := r.gw.Call(context.Background(), toolgate.Call{Tool: "native:fs.write", Principal: alice, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func mem(t *testing.T) store.Approvals {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A call waiting for approval resumes the moment it is approved; its
// receipt carries the approval id.
func TestWaitingCallResumesOnApproval(t *testing.T) {
	r := newRig(t, mem(t), time.Minute)
	if res := r.call(t, bigArgs("small")); res.Status != audit.StatusOK {
		t.Fatalf("a small write needs no approval: %+v", res)
	}
	done := make(chan *toolgate.Result, 1)
	go func() { done <- r.call(t, bigArgs("a rather large write")) }()
	id := <-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), alice, id, true, ""); errcode.CodeOf(err) != errcode.Forbidden {
		t.Fatalf("alice (no approver scope, the requester) approved her own call: %v", err)
	}
	waitFor(t, "the call waits (Waiting 1)", func() bool { return r.mgr.Waiting() == 1 })
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, "looks fine"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Status != audit.StatusOK || res.ApprovalID != id || r.ran.Load() != 2 {
		t.Fatalf("approved call: %+v (ran %d)", res, r.ran.Load())
	}
	if a, d := r.mgr.Resolved(); a != 1 || d != 0 || r.mgr.Waiting() != 0 {
		t.Errorf("after approval: Resolved %d approved, %d denied; Waiting %d", a, d, r.mgr.Waiting())
	}
}

// waitFor polls cond every 5 ms until it holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling cond
	}
}

// After the wait the call answers approval_required; once approved, a retry
// of the same call consumes the approval exactly once; a third retry needs a
// new approval; changed arguments are never covered; a denial answers
// approval_denied.
func TestRetryConsumesOnce(t *testing.T) {
	r := newRig(t, mem(t), 10*time.Millisecond)
	args := bigArgs("a rather large write")
	res := r.call(t, args)
	id := <-r.reqs.ids
	if code(res) != errcode.ApprovalRequired || res.Err.Details["approvalId"] != id || res.ApprovalID != id || r.ran.Load() != 0 {
		t.Fatalf("first call: %+v", res.Err)
	}
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if res := r.call(t, bigArgs("another large write")); code(res) != errcode.ApprovalRequired {
		t.Fatalf("changed arguments rode on the approval: %+v", res)
	}
	other := <-r.reqs.ids
	if res := r.call(t, args); res.Status != audit.StatusOK || res.ApprovalID != id {
		t.Fatalf("retry after approval: %+v", res)
	}
	if res := r.call(t, args); code(res) != errcode.ApprovalRequired || res.Err.Details["approvalId"] == id {
		t.Fatalf("third call reused the consumed approval: %+v", res.Err)
	}
	<-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), bob, other, false, "no"); err != nil {
		t.Fatal(err)
	}
	// The denied approval is spent: the same call asks for a new one.
	res = r.call(t, bigArgs("another large write"))
	if code(res) != errcode.ApprovalRequired || res.Err.Details["approvalId"] == other {
		t.Fatalf("after denial: %+v", res.Err)
	}
	<-r.reqs.ids
	var buf strings.Builder
	if err := r.gw.WriteReceipts(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"approvalId":"`+id+`"`) {
		t.Fatalf("no receipt carries approvalId %s:\n%s", id, buf.String())
	}
	if r.ran.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", r.ran.Load())
	}
}

// A waiting call that is denied answers approval_denied.
func TestDenied(t *testing.T) {
	r := newRig(t, mem(t), time.Minute)
	done := make(chan *toolgate.Result, 1)
	go func() { done <- r.call(t, bigArgs("a rather large write")) }()
	id := <-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), bob, id, false, "not today"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; code(res) != errcode.ApprovalDenied || r.ran.Load() != 0 {
		t.Fatalf("denied call: %+v", res.Err)
	}
	if a, d := r.mgr.Resolved(); a != 0 || d != 1 {
		t.Errorf("after denial: Resolved %d approved, %d denied", a, d)
	}
}

// An approval that expired, or whose rule was removed by a policy reload
// while the call waited, refuses at dispatch.
func TestRefusedAtDispatch(t *testing.T) {
	r := newRig(t, mem(t), 10*time.Millisecond)
	args := bigArgs("a rather large write")
	r.call(t, args)
	id := <-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	r.clk.Add(2 * time.Hour) // past the 1 h TTL
	if res := r.call(t, args); code(res) != errcode.ApprovalRequired || res.Err.Details["approvalId"] == id {
		t.Fatalf("an expired approval was used: %+v", res.Err)
	}
	<-r.reqs.ids

	// Rule removed while a call waits: the reload denies writes.
	r2 := newRig(t, mem(t), time.Minute)
	done := make(chan *toolgate.Result, 1)
	go func() { done <- r2.call(t, args) }()
	id = <-r2.reqs.ids
	if err := r2.gw.SetPolicy(compile(t, "default: deny\nrules: [{id: readers, effect: allow, tools: [\"native:fs.read*\"]}]\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Status != audit.StatusForbidden || code(res) != errcode.Forbidden || r2.ran.Load() != 0 {
		t.Fatalf("call approved under a removed rule: %+v", res)
	}
}

// Pending approvals survive a restart of the store.
func TestPendingSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	key, _ := receipt.GenerateKey()
	open := func() *sqlite.Store {
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{Signer: receipt.NewSigner(key)})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	r := newRig(t, st, 10*time.Millisecond)
	args := bigArgs("a rather large write")
	r.call(t, args)
	id := <-r.reqs.ids
	st.Close()

	st = open()
	defer st.Close()
	r = newRig(t, st, 10*time.Millisecond)
	pending, err := r.mgr.List(context.Background(), "acme", store.ApprovalPending)
	if err != nil || len(pending) != 1 || pending[0].ID != id {
		t.Fatalf("after restart: %v %v", pending, err)
	}
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if res := r.call(t, args); res.Status != audit.StatusOK || res.ApprovalID != id {
		t.Fatalf("retry after restart and approval: %+v", res)
	}
}

// approver: user asks the calling user in-band; the answer is recorded as
// the approval's resolution (approve runs the call, decline denies it); a
// client that cannot answer falls back to waiting for an approver.
func TestInBandUserApproval(t *testing.T) {
	const userPolicy = `
default: deny
rules:
  - {id: writers, effect: allow, tools: ["native:fs.write"]}
  - {id: ask-user, effect: require_approval, approver: user, tools: ["native:fs.write"], when: 'has(args.content) && size(args.content) > 10', reason: "confirm large writes"}
`
	for _, c := range []struct {
		name   string
		answer bool
		err    error
		want   errcode.Code
	}{
		{"approve", true, nil, ""},
		{"decline", false, nil, errcode.ApprovalDenied},
		{"cannot ask", false, context.DeadlineExceeded, errcode.ApprovalRequired},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, mem(t), 10*time.Millisecond)
			if err := r.gw.SetPolicy(compile(t, userPolicy)); err != nil {
				t.Fatal(err)
			}
			var asked string
			ctx := approval.WithElicitor(context.Background(), func(_ context.Context, msg string) (bool, string, error) {
				asked = msg
				return c.answer, "", c.err
			})
			res, err := r.gw.Call(ctx, toolgate.Call{Tool: "native:fs.write", Principal: alice, Args: bigArgs("a rather large write")})
			if err != nil {
				t.Fatal(err)
			}
			id := <-r.reqs.ids
			if code(res) != c.want {
				t.Fatalf("result %+v, want code %q", res.Err, c.want)
			}
			if !strings.Contains(asked, "native:fs.write") || !strings.Contains(asked, "confirm large writes") || !strings.Contains(asked, "rather large") {
				t.Fatalf("the user was asked %q", asked)
			}
			a, err := r.st.GetApproval(context.Background(), "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			switch c.name {
			case "approve":
				if a.Status != store.ApprovalConsumed || a.ResolvedBy != "user:alice" || res.ApprovalID != id {
					t.Fatalf("approval after an in-band yes: %+v", a)
				}
			case "decline":
				if a.Status != store.ApprovalDenied || a.ResolvedBy != "user:alice" {
					t.Fatalf("approval after an in-band no: %+v", a)
				}
			default:
				if a.Status != store.ApprovalPending {
					t.Fatalf("approval after a failed ask: %+v", a)
				}
			}
		})
	}
}

// Approvals are bound to the exact arguments: argsHash is computed over
// redacted arguments, so two calls differing only in a secret-looking
// value share it, but an approval of one never covers the other.
func TestApprovalBoundToExactArgs(t *testing.T) {
	r := newRig(t, mem(t), 10*time.Millisecond)
	a, b := bigArgs("sk-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), bigArgs("sk-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	first := r.call(t, a)
	id := <-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	second := r.call(t, b)
	if first.RequestedArgsHash != second.RequestedArgsHash {
		t.Fatalf("the premise does not hold: argsHash %s vs %s", first.RequestedArgsHash, second.RequestedArgsHash)
	}
	if code(second) != errcode.ApprovalRequired || r.ran.Load() != 0 {
		t.Fatalf("an approval for other (secret) arguments was used: %+v", second)
	}
	<-r.reqs.ids
	if res := r.call(t, a); res.Status != audit.StatusOK || res.ApprovalID != id {
		t.Fatalf("the approved arguments: %+v", res)
	}
}

// Numbers bind exactly: 100000000000000000000 and 100000000000000000001 are
// one float64 but two approvals.
func TestApprovalBindsNumbersExactly(t *testing.T) {
	r := newRig(t, mem(t), 10*time.Millisecond)
	a := json.RawMessage(`{"content":"a rather large write","n":100000000000000000000}`)
	b := json.RawMessage(`{"content":"a rather large write","n":100000000000000000001}`)
	r.call(t, a)
	id := <-r.reqs.ids
	if _, err := r.mgr.Resolve(context.Background(), bob, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if res := r.call(t, b); code(res) != errcode.ApprovalRequired || r.ran.Load() != 0 {
		t.Fatalf("an approval covered another number: %+v", res)
	}
	<-r.reqs.ids
	if res := r.call(t, a); res.Status != audit.StatusOK {
		t.Fatalf("the approved call: %+v", res)
	}
}

// watched is a store whose resolutions made "elsewhere" (resolveRemotely,
// straight on the store, bypassing the Manager) are announced through
// Watcher, as store/postgres announces another replica's.
type watched struct {
	store.Approvals
	mu       sync.Mutex
	watchers map[string][]chan struct{}
	watches  atomic.Int64
}

func (w *watched) WatchApproval(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.watchers[id] = append(w.watchers[id], ch)
	w.mu.Unlock()
	w.watches.Add(1)
	return ch, func() {}
}

func (w *watched) resolveRemotely(t *testing.T, id string, at time.Time) {
	t.Helper()
	if _, err := w.ResolveApproval(context.Background(), "acme", id, store.Resolution{Status: store.ApprovalApproved, By: "bob", At: at}); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.watchers[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// TestWatcherWakesWaiter: with a store that is a Watcher, a waiting call
// resumes on the store's wake-up for a resolution made by another process
// (the Manager's poll is an hour, so nothing else wakes it). A negative
// poll is refused.
func TestWatcherWakesWaiter(t *testing.T) {
	st := &watched{Approvals: mem(t), watchers: map[string][]chan struct{}{}}
	clk := newClock()
	reqs := &requests{Log: audit.NewMemoryLog(), ids: make(chan string, 16)}
	mgr, err := approval.New(approval.Options{Store: st, Events: reqs, TTL: time.Hour, Wait: time.Minute, Now: clk.Now, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *errcode.Error, 1)
	go func() {
		_, e := mgr.Await(context.Background(), approval.Binding{Tenant: "acme", Principal: "alice", ToolID: "native:fs.write", ArgsHash: "h"})
		done <- e
	}()
	id := <-reqs.ids
	for deadline := time.Now().Add(time.Minute); st.watches.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not watch its approval")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	st.resolveRemotely(t, id, clk.Now())
	select {
	case e := <-done:
		if e != nil {
			t.Fatalf("Await: %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not resume on the store's wake-up")
	}
	if _, err := approval.New(approval.Options{Store: st, Poll: -1}); errcode.CodeOf(err) != errcode.InvalidConfig {
		t.Fatalf("negative poll: %v, want InvalidConfig", err)
	}
}
