package pipeline

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
)

// CloseInterrupted closes calls that a previous run of the gateway started
// and never finished (issue 13 point 13): for each agent.toolCalled event
// of called (a store's open calls read at start before any call runs:
// sqlite.Store.OpenCalls, or on a shared store postgres.Store.OpenCalls,
// which returns only this replica's), it records agent.toolReturned {status:
// error, error.code: gateway_restarted, error.details.ran: "unknown"},
// without durationMs (whether and how long the tool ran is unknown), and
// its receipt: decision effect allow (the call had passed the gate; rule and
// policy version are not recorded at agent.toolCalled), executed args hash
// = the recorded argsHash, startedAt = the agent.toolCalled timestamp. So
// every call in the store is paired with its outcome and a receipt.
//
// It returns how many calls it closed. An event that is not a decodable
// agent.toolCalled is skipped (counted in the error, which names the first
// one); a write failure stops at once (AuditUnavailable). Call it before
// the pipeline serves calls, never while calls run: it cannot tell a
// running call from an interrupted one.
func (p *Pipeline) CloseInterrupted(ctx context.Context, called []audit.Event) (int, error) {
	closed, skipped := 0, 0
	var firstSkip error
	for i := range called {
		ev := &called[i]
		var tc audit.ToolCalled
		if ev.Type != audit.TypeToolCalled || json.Unmarshal(ev.Payload, &tc) != nil || tc.Validate() != nil {
			if skipped++; firstSkip == nil {
				firstSkip = fmt.Errorf("event %s is not a valid agent.toolCalled", ev.EventID)
			}
			continue
		}
		if err := p.closeInterrupted(ctx, ev, &tc); err != nil {
			return closed, err
		}
		closed++
	}
	if firstSkip != nil {
		return closed, errcode.Errorf(errcode.InvalidArgument, "%d open call event(s) skipped: %v", skipped, firstSkip)
	}
	return closed, nil
}

func (p *Pipeline) closeInterrupted(ctx context.Context, called *audit.Event, tc *audit.ToolCalled) error {
	e := errcode.New(errcode.GatewayRestarted, "the gateway stopped while the call ran; whether the tool ran is unknown").
		WithDetails(map[string]any{"ran": "unknown"})
	ref := tc.Ref()
	tr, err := audit.ReturnedError(ref, audit.ErrorObject{Code: string(e.Code), Message: e.Message, Details: e.Details}, 0, false)
	if err != nil {
		return err
	}
	ret, err := audit.NewReturnedEvent(called.RunID, &tr, called.EventID, p.opts.Now())
	if err != nil {
		return err
	}
	// The outcome belongs to the call's principal (event reads are scoped
	// to it); a call stored before events kept their principal names it
	// in its payload.
	ret.Tenant, ret.Principal = called.Tenant, called.Principal
	if ret.Principal == "" {
		ret.Principal = tc.Principal
	}
	f := new(frame)
	res := &f.res
	*res = Result{
		CallID: tc.CallID, RunID: called.RunID, ToolID: tc.ToolName, Status: audit.StatusError, Err: e,
		Decision:          policy.Decision{Effect: policy.EffectAllow},
		RequestedArgsHash: tc.ArgsHash, ExecutedArgsHash: tc.ArgsHash,
	}
	cs := &callState{f: f, res: res, started: called.Timestamp, red: p.opts.Redactor, c: Call{
		Tool: tc.ToolName, CallID: tc.CallID, RunID: called.RunID, AgentID: tc.AgentID, ParentCallID: tc.ParentCallID,
		Transport: catalog.Transport(tc.Transport), Principal: policy.Principal{ID: tc.Principal, Tenant: called.Tenant},
	}}
	f.events = [2]*audit.Event{ret}
	return p.recordOutcome(ctx, cs, 1)
}
