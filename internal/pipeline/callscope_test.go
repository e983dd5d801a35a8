package pipeline

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
)

// echoHook is an observe hook whose callbacks fail with a message quoting
// the call's apiKey argument (as a buggy or hostile receiver might).
type echoHook struct{ key string }

func (h echoHook) Before(context.Context, *hook.Call) (hook.Verdict, error) {
	return hook.Verdict{}, fmt.Errorf("receiver rejected key %s", h.key)
}
func (h echoHook) After(context.Context, *hook.Call, *hook.Outcome) error {
	return fmt.Errorf("receiver rejected key %s", h.key)
}
func (h echoHook) OnError(context.Context, *hook.Call, *hook.Outcome) error {
	return fmt.Errorf("receiver rejected key %s", h.key)
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Issue 12 point 6 (a), for log lines: the call-scoped values (those the
// key-name rule removed from the arguments) are scrubbed from the call's
// log lines and recorded error, and from nothing else.
func TestCallScopedValuesScrubLogs(t *testing.T) {
	const key = "k-live-logged-0042"
	var logs syncBuffer
	events := audit.NewMemoryLog()
	p, err := New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: events,
		Receipts: NewMemoryReceipts(receipt.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))),
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Hooks:    []hook.Registration{{Name: "siem", Hook: echoHook{key: key}, Mode: hook.Observe}}})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Load("p.yaml", []byte("rules:\n- {id: all, effect: allow, tools: ['native:svc.login']}\n"), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.NewSnapshot([]catalog.Tool{{Descriptor: catalog.ToolDescriptor{ToolID: "native:svc.login",
		Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}, Transport: catalog.TransportNative, Name: "svc.login"}}, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	login := NativeInvoker(func(_ context.Context, args json.RawMessage) (any, error) {
		var in struct{ APIKey string }
		json.Unmarshal(args, &in)
		return nil, errcode.Errorf(errcode.ToolExecutionFailed, "key %s refused", in.APIKey).WithDetails(map[string]any{"tried": in.APIKey})
	})
	p.Swap(&State{Catalog: snap, Policy: prog, Invokers: map[string]Invoker{"native:svc.login": login}})
	res, err := p.Call(context.Background(), Call{Tool: "native:svc.login", Args: json.RawMessage(`{"apiKey":"` + key + `"}`),
		Principal: policy.Principal{ID: "alice", Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != audit.StatusError || res.Err.Message != "key [REDACTED:argument] refused" || res.Err.Details["tried"] != "[REDACTED:argument]" {
		t.Fatalf("result: %s %+v", res.Status, res.Err)
	}
	if strings.Contains(logs.String(), key) || !strings.Contains(logs.String(), "receiver rejected key [REDACTED:argument]") {
		t.Fatalf("log lines:\n%s", logs.String())
	}
	var recorded bytes.Buffer
	for _, ev := range events.All() {
		recorded.Write(ev.Payload)
	}
	if strings.Contains(recorded.String(), key) {
		t.Fatalf("events hold the key: %s", recorded.String())
	}
	// The value is the call's alone: the gateway's redactor does not know it.
	if got := p.Redactor().RedactString("key " + key); got != "key "+key {
		t.Fatalf("the call's value was registered globally: %q", got)
	}
	if !errors.Is(res.Err, &errcode.Error{Code: errcode.ToolExecutionFailed}) {
		t.Fatalf("code %s", res.Err.Code)
	}
}

// A call closed as gateway_restarted keeps its principal on the closing
// event (event reads are scoped to it), also for a call stored before
// events kept one (then the payload's principal counts).
func TestCloseInterruptedKeepsPrincipal(t *testing.T) {
	events := audit.NewMemoryLog()
	p, err := New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: events,
		Receipts: NewMemoryReceipts(receipt.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32))))})
	if err != nil {
		t.Fatal(err)
	}
	var called []audit.Event
	for i, owner := range []string{"alice", ""} {
		tc := audit.NewToolCalled(audit.CallRef{AgentID: audit.AgentSystem, ToolName: "native:svc.login", CallID: fmt.Sprintf("call-%d", i)},
			strings.Repeat("a", 64), "alice", audit.TransportNative)
		ev, err := audit.NewCalledEvent(fmt.Sprintf("run-%d", i), &tc, p.opts.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev.Tenant, ev.Principal = "acme", owner
		if err := events.Append(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		called = append(called, *ev)
	}
	if n, err := p.CloseInterrupted(context.Background(), called); err != nil || n != 2 {
		t.Fatalf("CloseInterrupted: %d %v", n, err)
	}
	for _, ev := range events.All() {
		if ev.Type == audit.TypeToolReturned && ev.Principal != "alice" {
			t.Errorf("closing event of %s belongs to %q, want alice", ev.RunID, ev.Principal)
		}
	}
}
