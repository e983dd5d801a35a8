package toolgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
)

const allowAllPolicy = "rules: [{id: all, effect: allow, tools: ['*']}]"

func register(t *testing.T, gw *toolgate.Gateway, id string, fn toolgate.NativeFunc) {
	t.Helper()
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}, fn); err != nil {
		t.Fatal(err)
	}
}

// Every call that ran is recorded with a toolReturned and a receipt, whatever
// the tool returned as an error: gate codes, unknown codes, empty messages,
// unmarshalable or secret-bearing details, typed-nil errors.
func TestOddToolErrorsAreRecordedHonestly(t *testing.T) {
	red := audit.NewRedactor()
	red.AddSecret("pw", "hunter2-hunter2-hunter2")
	log := audit.NewMemoryLog()
	gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(t, allowAllPolicy), Events: log, Redactor: red})
	if err != nil {
		t.Fatal(err)
	}
	var typedNil *errcode.Error
	cases := map[string]error{
		"native:e.forbidden": errcode.New(errcode.Forbidden, "nope"),
		"native:e.limited":   errcode.New(errcode.RateLimited, "slow down"),
		"native:e.unknown":   &errcode.Error{Code: "weird_code", Message: "odd"},
		"native:e.empty":     errors.New(""),
		"native:e.chan":      errcode.New(errcode.ToolExecutionFailed, "x").WithDetails(map[string]any{"c": make(chan int)}),
		"native:e.secret":    errcode.New(errcode.ToolExecutionFailed, "failed").WithDetails(map[string]any{"token": "hunter2-hunter2-hunter2"}),
		"native:e.typednil":  typedNil,
	}
	for id, e := range cases {
		e := e
		register(t, gw, id, func(context.Context, json.RawMessage) (any, error) { return nil, e })
	}
	for id := range cases {
		res, err := gw.Call(context.Background(), toolgate.Call{Tool: id, Principal: alice, RunID: strings.ReplaceAll(id, ":", "-")})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if res.Status != audit.StatusError || res.Err == nil || res.Err.Message == "" || res.Err.Code == errcode.Internal {
			t.Fatalf("%s: %+v", id, res)
		}
		if res.Err.Code == errcode.Forbidden || res.Err.Code == errcode.RateLimited {
			t.Errorf("%s: a tool error carries the gate code %s", id, res.Err.Code)
		}
		evs := log.Events("acme", strings.ReplaceAll(id, ":", "-"))
		if len(evs) != 2 || evs[1].Type != audit.TypeToolReturned {
			t.Fatalf("%s: %d events", id, len(evs))
		}
		if bytes.Contains(evs[1].Payload, []byte("hunter2")) || strings.Contains(res.Err.Error(), "hunter2") {
			t.Errorf("%s: secret leaked: %s", id, evs[1].Payload)
		}
	}
	if got := len(verifyReceipts(t, gw)); got != len(cases) {
		t.Fatalf("%d receipts for %d calls", got, len(cases))
	}
}

// An enforce after-hook that fails withholds the result, and the call is
// still recorded (status error, result_withheld, durationMs present).
func TestAfterHookWithholdsButRecords(t *testing.T) {
	h := newHarness(t, mustPolicy(t, allowAllPolicy), hook.Registration{Name: "dlp", Mode: hook.Enforce, Hook: hook.Funcs{
		AfterFunc: func(context.Context, *hook.Call, *hook.Outcome) error {
			return errors.New("result contains a card number")
		},
	}})
	res, err := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Principal: alice, RunID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != audit.StatusError || res.Err.Code != errcode.ResultWithheld || res.Output != nil || !res.Ran {
		t.Fatalf("%+v", res)
	}
	ret := returnedPayload(t, h.events(t, "w"))
	if ret["status"] != "error" || ret["durationMs"] == nil {
		t.Errorf("toolReturned %v", ret)
	}
	if rs := verifyReceipts(t, h.gw); len(rs) != 1 || rs[0].Error.Code != "result_withheld" {
		t.Fatalf("receipts %+v", rs)
	}
}

// A caller that goes away mid-call does not erase the record: the call is
// recorded as cancelled, with its receipt.
func TestCancelledCallIsRecorded(t *testing.T) {
	h := newHarness(t, mustPolicy(t, allowAllPolicy))
	ctx, cancel := context.WithCancel(context.Background())
	register(t, h.gw, "native:slow.op", func(ctx context.Context, _ json.RawMessage) (any, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	res, err := h.gw.Call(ctx, toolgate.Call{Tool: "native:slow.op", Principal: alice, RunID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != audit.StatusError || res.Err.Code != errcode.Cancelled {
		t.Fatalf("%+v", res)
	}
	if len(h.events(t, "c")) != 2 || len(verifyReceipts(t, h.gw)) != 1 {
		t.Fatal("cancelled call not recorded")
	}
	// A context cancelled before the call: nothing happens, nothing to record.
	if _, err := h.gw.Call(ctx, toolgate.Call{Tool: "native:text.echo", Principal: alice}); !errors.Is(err, &errcode.Error{Code: errcode.Cancelled}) {
		t.Fatalf("pre-cancelled: %v", err)
	}
}

// Hooks get copies: changing the bytes they were handed changes nothing.
func TestHooksCannotMutateInPlace(t *testing.T) {
	scribble := func(b []byte) {
		for i := range b {
			b[i] = ' '
		}
	}
	h := newHarness(t, mustPolicy(t, allowAllPolicy), hook.Registration{Name: "scribbler", Mode: hook.Observe, Hook: hook.Funcs{
		BeforeFunc: func(_ context.Context, c *hook.Call) (hook.Verdict, error) {
			scribble(c.Args)
			return hook.Verdict{}, nil
		},
		AfterFunc: func(_ context.Context, _ *hook.Call, o *hook.Outcome) error { scribble(o.Output); return nil },
	}})
	args := json.RawMessage(`{"path":"/tmp/ok"}`)
	res, _ := h.gw.Call(context.Background(), toolgate.Call{Tool: "native:text.echo", Principal: alice, Args: args})
	if res.Status != audit.StatusOK || string(res.Output) != `{"path":"/tmp/ok"}` || string(args) != `{"path":"/tmp/ok"}` {
		t.Fatalf("%+v (args now %s)", res, args)
	}
}

func TestBadCallerIDsAreInvalidArgument(t *testing.T) {
	h := newHarness(t, mustPolicy(t, allowAllPolicy))
	for name, c := range map[string]toolgate.Call{
		"self parent":     {CallID: "a", ParentCallID: "a"},
		"long run":        {RunID: strings.Repeat("r", 129)},
		"bad utf8":        {CallID: "\xff\xfe"},
		"control char":    {AgentID: "agent\n1"},
		"bogus transport": {Transport: "smoke-signal"},
	} {
		c.Tool, c.Principal = "native:text.echo", alice
		if _, err := h.gw.Call(context.Background(), c); !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if h.invoked.Load() != 0 || h.log.Len() != 0 {
		t.Fatal("a rejected request ran or was recorded")
	}
}

// A native tool that ignores its context and returns after the timeout does
// not get its late result through; the call is a recorded timeout.
func TestLateToolIsATimeout(t *testing.T) {
	log := audit.NewMemoryLog()
	gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(t, allowAllPolicy), Events: log, ToolTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	register(t, gw, "native:stubborn.op", func(ctx context.Context, _ json.RawMessage) (any, error) {
		<-ctx.Done() // wait past the deadline, then answer as if all went well
		return "done", nil
	})
	register(t, gw, "native:bad.json", func(context.Context, json.RawMessage) (any, error) { return json.RawMessage("{bad"), nil })
	res, _ := gw.Call(context.Background(), toolgate.Call{Tool: "native:stubborn.op", Principal: alice})
	if res.Status != audit.StatusError || res.Err.Code != errcode.Timeout || res.Output != nil {
		t.Fatalf("%+v", res)
	}
	res, _ = gw.Call(context.Background(), toolgate.Call{Tool: "native:bad.json", Principal: alice})
	if res.Status != audit.StatusError || res.Err.Code != errcode.ToolExecutionFailed {
		t.Fatalf("invalid JSON result: %+v", res)
	}
}
