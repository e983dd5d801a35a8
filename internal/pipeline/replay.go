package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

// maxReplays bounds the replay sessions a Pipeline keeps in memory (one per
// replaying run); past it the oldest is dropped.
const maxReplays = 4096

// replayKey identifies a replaying run: (tenant, new runId, replayed runId).
type replayKey struct{ tenant, runID, replayOf string }

// replaySession matches the calls of one replaying run to the recorded
// calls of the run it replays, by position in the call graph: the k-th call
// under a parent (or at the root) is matched to the recorded k-th call
// under the recorded counterpart of that parent.
type replaySession struct {
	mu       sync.Mutex
	loaded   bool
	loadErr  error
	recorded []store.RecordedCall
	children map[string][]int  // recorded parent callId ("" at the root) → indices, in recorded order
	next     map[string]int    // recorded parent callId → the next child position
	mapping  map[string]string // new callId → recorded callId
}

// replays holds the Pipeline's replay sessions.
type replays struct {
	mu    sync.Mutex
	m     map[replayKey]*replaySession
	order []replayKey
}

// session returns the session of k, creating it.
func (r *replays) session(k replayKey) *replaySession {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[replayKey]*replaySession{}
	}
	if s, ok := r.m[k]; ok {
		return s
	}
	if len(r.order) >= maxReplays {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
	s := &replaySession{}
	r.m[k] = s
	r.order = append(r.order, k)
	return s
}

// replayMatch is what a replayed call was matched to.
type replayMatch struct {
	rec *store.RecordedCall // the recorded counterpart; nil if none
}

// answersFromRecording reports whether the tool's replayPolicy makes a
// replayed call answered from the recording: non-deterministic and
// idempotent (and a tool without a replayPolicy, which is never assumed
// deterministic) are; deterministic tools run again.
func answersFromRecording(d *catalog.ToolDescriptor) bool {
	return d.ReplayPolicy != catalog.ReplayDeterministic
}

// hasScope reports whether pr holds scope.
func hasScope(pr policy.Principal, scope string) bool {
	return scope != "" && slices.Contains(pr.Scopes, scope)
}

// recordGate checks a call that asks to be recorded or to replay a run:
// the principal needs Options.RecordScope and the gateway a recording
// store. It returns the refusal, or nil.
func (p *Pipeline) recordGate(c *Call) *errcode.Error {
	what := "record its calls"
	if c.ReplayOf != "" {
		what = "replay a recorded run"
	}
	if p.opts.Recordings == nil {
		return errcode.Errorf(errcode.Forbidden, "this gateway has no recording store: it cannot %s", what).
			WithDetails(map[string]any{"reason": "recording_unavailable"})
	}
	if !hasScope(c.Principal, p.opts.RecordScope) {
		return errcode.Errorf(errcode.Forbidden, "principal %s may not %s: it needs scope %s", c.Principal.ID, what, p.opts.RecordScope).
			WithDetails(map[string]any{"reason": "record_scope", "scope": p.opts.RecordScope})
	}
	return nil
}

// load reads the recorded run once.
func (s *replaySession) load(ctx context.Context, rs store.Recordings, tenant, runID string) error {
	if s.loaded {
		return s.loadErr
	}
	calls, err := rs.RecordedRun(ctx, tenant, runID)
	if err != nil {
		return err // not cached: a store error may pass
	}
	s.loaded = true
	if len(calls) == 0 {
		s.loadErr = errcode.Errorf(errcode.NotFound, "recorded run %q not found", runID).WithDetails(map[string]any{"replayOf": runID})
		return s.loadErr
	}
	s.recorded = calls
	s.children, s.next, s.mapping = map[string][]int{}, map[string]int{}, map[string]string{}
	known := map[string]bool{}
	for _, c := range calls {
		known[c.CallID] = true
	}
	for i, c := range calls {
		parent := c.ParentCallID
		if !known[parent] {
			parent = "" // a recorded call whose parent was not recorded is a root of the recording
		}
		s.children[parent] = append(s.children[parent], i)
	}
	return nil
}

// divergence builds the replay_divergence error of a replayed call.
func divergence(replayOf, what string, rec *store.RecordedCall, cs *callState, extra map[string]any) *errcode.Error {
	d := map[string]any{"replayOf": replayOf, "differs": what,
		"new": map[string]any{"callId": cs.c.CallID, "parentCallId": cs.c.ParentCallID, "toolId": cs.res.ToolID,
			"argsHash": cs.res.RequestedArgsHash, "effect": string(cs.res.Decision.Effect)}}
	if rec != nil {
		d["recorded"] = map[string]any{"callId": rec.CallID, "parentCallId": rec.ParentCallID, "toolId": rec.ToolID,
			"argsHash": rec.ArgsHash, "effect": rec.Effect, "status": rec.Status}
	}
	for k, v := range extra {
		d[k] = v
	}
	msg := "replay diverged from run " + replayOf + ": " + what + " differs from the recorded call"
	if rec == nil {
		msg = "replay diverged from run " + replayOf + ": the recorded run has no call at this place"
	}
	return errcode.New(errcode.ReplayDivergence, msg).WithDetails(d)
}

// matchReplay finds the recorded counterpart of a replayed call (before its
// decision) and checks tool and argsHash. It returns the divergence, or
// nil with cs.replay set.
func (p *Pipeline) matchReplay(ctx context.Context, cs *callState) *errcode.Error {
	c := &cs.c
	s := p.replays.session(replayKey{c.Principal.Tenant, c.RunID, c.ReplayOf})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx, p.opts.Recordings, c.Principal.Tenant, c.ReplayOf); err != nil {
		return errcode.As(err)
	}
	if !hasScope(c.Principal, p.opts.ReadersScope) {
		// Like events: without the audit readers scope, only one's own
		// calls are readable, and a replay answers recorded content.
		for i := range s.recorded {
			if s.recorded[i].Principal != c.Principal.ID {
				return errcode.Errorf(errcode.NotFound, "recorded run %q not found", c.ReplayOf).WithDetails(map[string]any{"replayOf": c.ReplayOf})
			}
		}
	}
	parent := ""
	if c.ParentCallID != "" {
		rp, ok := s.mapping[c.ParentCallID]
		if !ok {
			return divergence(c.ReplayOf, "parentCallId", nil, cs, map[string]any{"reason": "the parent call is not a call of this replay"})
		}
		parent = rp
	}
	pos := s.next[parent]
	s.next[parent] = pos + 1
	kids := s.children[parent]
	if pos >= len(kids) {
		return divergence(c.ReplayOf, "order", nil, cs, map[string]any{"position": pos, "recordedCalls": len(kids)})
	}
	rec := s.recorded[kids[pos]]
	s.mapping[c.CallID] = rec.CallID
	cs.replay = &replayMatch{rec: &rec}
	if rec.ToolID != cs.res.ToolID || rec.ArgsHash != cs.res.RequestedArgsHash {
		// Is it a recorded sibling at another place? Then the order differs.
		for i, k := range kids {
			o := s.recorded[k]
			if i != pos && o.ToolID == cs.res.ToolID && o.ArgsHash == cs.res.RequestedArgsHash {
				return divergence(c.ReplayOf, "order", &rec, cs, map[string]any{"position": pos, "recordedPosition": i})
			}
		}
		if rec.ToolID != cs.res.ToolID {
			return divergence(c.ReplayOf, "toolId", &rec, cs, nil)
		}
		return divergence(c.ReplayOf, "argsHash", &rec, cs, nil)
	}
	return nil
}

// checkReplayDecision compares the call's decision with the recorded one:
// a call denied in the recording and allowed now, or the reverse, diverges.
func checkReplayDecision(cs *callState) *errcode.Error {
	if cs.replay == nil {
		return nil
	}
	rec := cs.replay.rec
	then := rec.Effect == string(policy.EffectDeny)
	now := cs.res.Decision.Effect == policy.EffectDeny
	if then != now {
		return divergence(cs.c.ReplayOf, "decision", rec, cs, map[string]any{"ruleId": cs.res.Decision.RuleID, "recordedRuleId": rec.RuleID})
	}
	return nil
}

// recordedInvoker answers a replayed call from its recording: the recorded
// result, or the recorded error with its recorded result content.
func recordedInvoker(rec *store.RecordedCall) Invoker {
	return InvokerFunc(func(context.Context, *catalog.Tool, json.RawMessage) (json.RawMessage, error) {
		if rec.Status == string(audit.StatusOK) {
			return rec.Result, nil
		}
		e := &errcode.Error{Code: errcode.ToolExecutionFailed}
		if rec.Error != nil {
			e = &errcode.Error{Code: errcode.Code(rec.Error.Code), Message: rec.Error.Message, Details: rec.Error.Details}
		}
		return rec.Result, e
	})
}

// sameCanonical reports whether a and b are the same JSON value (RFC 8785
// canonical forms equal).
func sameCanonical(a, b []byte) bool {
	ca, err := canonjson.Canonicalize(a)
	if err != nil {
		return false
	}
	cb, err := canonjson.Canonicalize(b)
	return err == nil && bytes.Equal(ca, cb)
}

// hashHex is the lowercase hex SHA-256 of b (the receipt's resultHash).
func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// checkReplayResult compares a deterministic tool's new outcome with the
// recorded one: status, error code, and the result hash.
func checkReplayResult(cs *callState) *errcode.Error {
	rec := cs.replay.rec
	res := cs.res
	switch {
	case string(res.Status) != rec.Status:
		return divergence(cs.c.ReplayOf, "status", rec, cs, map[string]any{"status": string(res.Status), "recordedStatus": rec.Status})
	case res.Status == audit.StatusOK && hashHex(res.Output) != rec.ResultHash:
		return divergence(cs.c.ReplayOf, "resultHash", rec, cs, map[string]any{"resultHash": hashHex(res.Output), "recordedResultHash": rec.ResultHash})
	case res.Err != nil && rec.Error != nil && string(res.Err.Code) != rec.Error.Code:
		return divergence(cs.c.ReplayOf, "error", rec, cs, map[string]any{"code": string(res.Err.Code), "recordedCode": rec.Error.Code})
	}
	return nil
}

// record stores the call's content when it is recorded (cs.record), after
// its outcome is durable. A failure is logged: the call's events and
// receipt are already written, and its answer stands.
func (p *Pipeline) record(cs *callState) {
	if !cs.record || p.opts.Recordings == nil {
		return
	}
	res := cs.res
	args, err := cs.red.RedactJSON(cs.args)
	if err != nil {
		p.opts.Logger.ErrorContext(cs.rec, "recording: arguments do not redact; call not recorded", "callId", res.CallID)
		return
	}
	rc := &store.RecordedCall{
		Tenant: cs.c.Principal.Tenant, RunID: res.RunID, CallID: res.CallID, ParentCallID: cs.c.ParentCallID,
		AgentID: cs.c.AgentID, Principal: cs.c.Principal.ID, ToolID: res.ToolID, Transport: string(cs.c.Transport),
		ReplayPolicy: string(cs.tool.Descriptor.ReplayPolicy),
		Effect:       string(res.Decision.Effect), RuleID: res.Decision.RuleID,
		ArgsHash: res.RequestedArgsHash, Args: args, Status: string(res.Status),
		Ran: res.Ran, ReceiptID: res.ReceiptID, StartedAt: cs.started,
	}
	if res.Ran {
		rc.DurationMs = res.DurationMs
	}
	if res.Err != nil {
		rc.Error = &store.RecordedError{Code: string(res.Err.Code), Message: res.Err.Message, Details: res.Err.Details}
	}
	if len(res.Output) > 0 {
		if res.Status == audit.StatusOK {
			rc.ResultHash = hashHex(res.Output)
		}
		red, err := cs.red.RedactJSON(res.Output)
		switch {
		case err != nil:
			p.opts.Logger.ErrorContext(cs.rec, "recording: result does not redact; result not recorded", "callId", res.CallID)
		case sameCanonical(red, res.Output):
			// The redaction removed nothing: the result is stored byte for
			// byte, so it hashes to the receipt's resultHash.
			rc.Result = res.Output
		default:
			rc.Result = red
			rc.ResultRedacted = rc.ResultHash != ""
		}
	}
	if err := p.opts.Recordings.AppendRecordedCall(cs.rec, rc); err != nil {
		p.opts.Logger.ErrorContext(cs.rec, "recording: store failed; call not recorded", "callId", res.CallID, "err", cs.red.RedactString(err.Error()))
	}
}
