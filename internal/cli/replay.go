package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

func newReplayCmd() *cobra.Command {
	var file, tenant, run, url, key, newRun string
	cmd := &cobra.Command{
		Use:   "replay --config FILE --run ID [--tenant T] [--url URL] [--key KEY] [--new-run ID]",
		Short: "Re-run a recorded run's calls through a running gateway and stop at the first divergence",
		Long: `Read the recorded calls of run --run (tenant --tenant) from the configured store and send them again,
in their recorded order, to the gateway at --url as POST /v1/calls with replayOf set, under the API key
--key (or $TOOLGATE_KEY): each goes through the whole gate as that key's principal, which needs
audit.record_scope and the run's tenant. The calls keep the recorded call graph: a recorded child's
parentCallId is the new callId of its recorded parent. The arguments sent are the recorded ones, that is
the REDACTED arguments (a secret the redaction removed is not sent again).

Non-deterministic and idempotent tools are answered by the gateway from the recording (with the
recorded durationMs) without reaching the upstream; deterministic tools run and their result hash is
compared. Prints one JSON line per call; at the first replay_divergence it prints the divergence's
details and exits 1.

Exit codes: 0 the replay matched the recording, 1 it diverged or a call failed to be sent, 2 usage or
configuration error (no such recorded run included).`,
		Example: `  toolgate replay --config toolgate.yaml --tenant acme --run run-42 --key $TOOLGATE_KEY
  toolgate replay verify --config toolgate.yaml --tenant acme --run run-42 --against run-42-replay-1a2b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := openConfigStore(ctx, file)
			if err != nil {
				return err
			}
			defer st.Close()
			calls, err := st.RecordedRun(ctx, tenant, run)
			if err != nil {
				return failure("reading recorded run %s: %v", run, err)
			}
			if len(calls) == 0 {
				return usage("no recorded run %q in tenant %q", run, tenant)
			}
			if key == "" {
				key = os.Getenv("TOOLGATE_KEY")
			}
			if newRun == "" {
				b := make([]byte, 4)
				_, _ = rand.Read(b)
				newRun = run + "-replay-" + hex.EncodeToString(b)
			}
			return replayRun(ctx, cmd.OutOrStdout(), strings.TrimSuffix(url, "/"), key, run, newRun, calls)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required): the store the recording is read from")
	f.StringVar(&tenant, "tenant", "", "tenant of the recorded run")
	f.StringVar(&run, "run", "", "the recorded run to replay (required)")
	f.StringVar(&url, "url", "http://127.0.0.1:7070", "the gateway's base URL (POST <url>/v1/calls)")
	f.StringVar(&key, "key", "", "API key or bearer token (default $TOOLGATE_KEY)")
	f.StringVar(&newRun, "new-run", "", "runId of the replay (default <run>-replay-<random>)")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("run")
	cmd.AddCommand(newReplayVerifyCmd())
	return cmd
}

// openConfigStore loads the config file and opens its store read-mostly
// (openStore). Errors are usage errors (exit 2): a config that does not
// load, a store that is not there.
func openConfigStore(ctx context.Context, file string) (store.Store, error) {
	cfg, err := loadConfig(file)
	if err != nil {
		return nil, asUsage(err)
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, asUsage(err)
	}
	return st, nil
}

// asUsage turns a CLI failure into a usage error (exit 2).
func asUsage(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return &exitError{code: ExitUsage, err: ee.err}
	}
	return usage("%v", err)
}

// replayLine is one printed line of `toolgate replay`.
type replayLine struct {
	RecordedCallID string             `json:"recordedCallId"`
	CallID         string             `json:"callId,omitempty"`
	RunID          string             `json:"runId"`
	ToolID         string             `json:"toolId"`
	Status         string             `json:"status"`
	Error          *audit.ErrorObject `json:"error,omitempty"`
	DurationMs     *int64             `json:"durationMs,omitempty"`
}

// replayRun sends calls (a recorded run, in order) to base/v1/calls as a
// replay of run, in the new run newRun.
func replayRun(ctx context.Context, out io.Writer, base, key, run, newRun string, calls []store.RecordedCall) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	hc := &http.Client{Timeout: 5 * time.Minute}
	newIDs := map[string]string{} // recorded callId → new callId
	for i, rc := range calls {
		body := map[string]any{"toolId": rc.ToolID, "args": rc.Args, "runId": newRun, "replayOf": run}
		if rc.AgentID != "" {
			body["agentId"] = rc.AgentID
		}
		if p, ok := newIDs[rc.ParentCallID]; ok && rc.ParentCallID != "" {
			body["parentCallId"] = p
		}
		raw, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/calls", bytes.NewReader(raw))
		if err != nil {
			return usage("--url %s: %v", base, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return failure("call %d (%s): %v", i, rc.CallID, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return failure("call %d (%s): reading the answer: %v", i, rc.CallID, err)
		}
		line := replayLine{RecordedCallID: rc.CallID, RunID: newRun, ToolID: rc.ToolID}
		if resp.StatusCode == http.StatusOK {
			var cr struct {
				CallID     string             `json:"callId"`
				Status     string             `json:"status"`
				Error      *audit.ErrorObject `json:"error"`
				DurationMs *int64             `json:"durationMs"`
			}
			if err := json.Unmarshal(data, &cr); err != nil {
				return failure("call %d (%s): answer is not a CallResponse: %v", i, rc.CallID, err)
			}
			line.CallID, line.Status, line.Error, line.DurationMs = cr.CallID, cr.Status, cr.Error, cr.DurationMs
		} else {
			var env struct {
				Error   string         `json:"error"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			}
			if err := json.Unmarshal(data, &env); err != nil || env.Error == "" {
				return failure("call %d (%s): HTTP %d: %s", i, rc.CallID, resp.StatusCode, bytes.TrimSpace(data))
			}
			line.CallID, _ = env.Details["callId"].(string)
			line.Status = "refused"
			line.Error = &audit.ErrorObject{Code: env.Error, Message: env.Message, Details: env.Details}
			// A refusal matches the recording only when the recorded call
			// was refused the same way (a policy denial replayed): any
			// other (no such run for this key's tenant, no scope, an
			// unknown key) ends the replay.
			if rc.Status == string(audit.StatusOK) || rc.Error == nil || rc.Error.Code != env.Error {
				if err := enc.Encode(line); err != nil {
					return err
				}
				return failure("call %d (%s) refused: %s: %s", i, rc.CallID, env.Error, env.Message)
			}
		}
		if line.CallID != "" {
			newIDs[rc.CallID] = line.CallID
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		if line.Error != nil && line.Error.Code == string(errcode.ReplayDivergence) {
			d, _ := json.Marshal(line.Error.Details)
			return failure("replay of %s diverged at call %d (recorded %s): %s %s", run, i, rc.CallID, line.Error.Message, d)
		}
	}
	fmt.Fprintf(out, "replay %s of %s: %d calls matched the recording\n", newRun, run, len(calls))
	return nil
}

func newReplayVerifyCmd() *cobra.Command {
	var file, tenant, run, against string
	cmd := &cobra.Command{
		Use:   "verify --config FILE --run A [--tenant T] [--against B]",
		Short: "Verify one run's events, receipts and recording; with --against, compare two runs call by call",
		Long: `Check run --run of tenant --tenant in the configured store:

  - every agent.toolCalled has exactly one agent.toolReturned and one receipt, and the reverse;
  - the events, the receipt and the recording agree on the argsHash (the requestedArgsHash), and a
    recorded call's argsHash is the hash of its stored redacted arguments;
  - requestedArgsHash differs from executedArgsHash only with a mutationSource;
  - failure honesty: an error outcome is never recorded as ok (status ok has no error and no MCP
    isError result; every other status has an error code; durationMs only when the tool ran), and the
    events, receipt and recording carry the same status;
  - a recorded result hashes to the receipt's resultHash (unless the redaction changed it, noted);
  - the nested call graph (parentCallId) is a tree: no cycle, no duplicate, no parent outside the run.

With --against B, the two runs are compared call by call, in the order their calls started (toolId,
argsHash, place in the call graph, status, error code, resultHash), and the first difference is
printed. The signatures and chain of the receipts are checked by 'toolgate receipts verify'.

Exit codes: 0 verified (and equal), 1 a verification failure or a difference, 2 usage or
configuration error (an unknown run included).`,
		Example: `  toolgate replay verify --config toolgate.yaml --tenant acme --run run-42
  toolgate replay verify --config toolgate.yaml --tenant acme --run run-42 --against run-42-replay-1a2b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := openConfigStore(ctx, file)
			if err != nil {
				return err
			}
			defer st.Close()
			a, err := loadRun(ctx, st, tenant, run)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			problems := verifyRun(a)
			var b *runRecord
			if against != "" {
				if b, err = loadRun(ctx, st, tenant, against); err != nil {
					return err
				}
				for _, p := range verifyRun(b) {
					problems = append(problems, against+": "+p)
				}
			}
			for _, p := range problems {
				fmt.Fprintf(out, "FAIL %s\n", p)
			}
			if len(problems) > 0 {
				return failure("run %s: %d verification failure(s)", run, len(problems))
			}
			fmt.Fprintf(out, "ok run %s: %d calls, %d recorded, events, receipts and recording agree; the call graph is a tree\n", run, len(a.calls), a.recorded)
			if b != nil {
				if d := compareRuns(a, b); d != "" {
					fmt.Fprintf(out, "DIFF %s\n", d)
					return failure("runs %s and %s differ", run, against)
				}
				fmt.Fprintf(out, "ok run %s and run %s are the same, call by call (%d calls)\n", run, against, len(a.calls))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required): the store to read")
	f.StringVar(&tenant, "tenant", "", "tenant of the runs")
	f.StringVar(&run, "run", "", "the run to verify (required)")
	f.StringVar(&against, "against", "", "a second run to compare with --run, call by call")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("run")
	return cmd
}

// runCall is one call of a run, as its events, receipt and recording say.
type runCall struct {
	callID, parent, toolID, argsHash string
	called, returned                 int // number of each event
	status, errCode                  string
	durationMs                       *int64
	receipt                          *receipt.Receipt
	receipts                         int
	rec                              *store.RecordedCall
}

// runRecord is everything the store holds about one run.
type runRecord struct {
	id       string
	calls    []*runCall // in agent.toolCalled order
	byID     map[string]*runCall
	recorded int
	problems []string // found while loading (an event that does not decode)
}

// loadRun reads run's events, receipts and recorded calls. An unknown run
// is a usage error.
func loadRun(ctx context.Context, st store.Store, tenant, run string) (*runRecord, error) {
	r := &runRecord{id: run, byID: map[string]*runCall{}}
	get := func(id string) *runCall {
		c := r.byID[id]
		if c == nil {
			c = &runCall{callID: id}
			r.byID[id] = c
		}
		return c
	}
	for after := int64(-1); ; {
		evs, err := st.EventsByRun(ctx, tenant, run, after, store.MaxLimit)
		if err != nil {
			return nil, failure("reading run %s: %v", run, err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			after = ev.Sequence
			switch ev.Type {
			case audit.TypeToolCalled:
				var p struct {
					CallID       string `json:"callId"`
					ParentCallID string `json:"parentCallId"`
					ToolID       string `json:"toolId"`
					ToolName     string `json:"toolName"`
					ArgsHash     string `json:"argsHash"`
				}
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					r.problems = append(r.problems, fmt.Sprintf("event %d does not decode: %v", ev.Sequence, err))
					continue
				}
				c := get(p.CallID)
				if c.called == 0 {
					r.calls = append(r.calls, c)
				}
				c.called++
				c.parent, c.argsHash, c.toolID = p.ParentCallID, p.ArgsHash, p.ToolID
				if c.toolID == "" {
					c.toolID = p.ToolName
				}
			case audit.TypeToolReturned:
				var p struct {
					CallID     string             `json:"callId"`
					Status     string             `json:"status"`
					Error      *audit.ErrorObject `json:"error"`
					DurationMs *int64             `json:"durationMs"`
				}
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					r.problems = append(r.problems, fmt.Sprintf("event %d does not decode: %v", ev.Sequence, err))
					continue
				}
				c := get(p.CallID)
				c.returned++
				c.status, c.durationMs = p.Status, p.DurationMs
				if p.Error != nil {
					c.errCode = p.Error.Code
				}
			}
		}
	}
	if len(r.byID) == 0 {
		return nil, usage("no run %q in tenant %q", run, tenant)
	}
	chains, err := storeChains(ctx, st)
	if err != nil {
		return nil, failure("reading receipt chains: %v", err)
	}
	for _, ch := range chains {
		for from := uint64(0); ; {
			rs, err := st.ReceiptsByChain(ctx, ch.ID, from, store.MaxLimit)
			if err != nil {
				return nil, failure("reading chain %s: %v", ch.ID, err)
			}
			for _, rc := range rs {
				from = rc.Seq + 1
				if rc.RunID == run && rc.Tenant == tenant {
					c := get(rc.CallID)
					c.receipts++
					if c.receipt == nil {
						c.receipt = rc
					}
				}
			}
			if len(rs) < store.MaxLimit {
				break
			}
		}
	}
	recs, err := st.RecordedRun(ctx, tenant, run)
	if err != nil {
		return nil, failure("reading the recording of %s: %v", run, err)
	}
	for i := range recs {
		get(recs[i].CallID).rec = &recs[i]
	}
	r.recorded = len(recs)
	return r, nil
}

// sha256Hex is the lowercase hex SHA-256 of b.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// verifyRun checks one run (see the verify command's help) and returns
// its problems, each naming the call.
func verifyRun(r *runRecord) []string {
	problems := append([]string(nil), r.problems...)
	bad := func(c *runCall, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("call %s: %s", c.callID, fmt.Sprintf(format, args...)))
	}
	red := audit.NewRedactor()
	var rcpts []*receipt.Receipt
	for _, c := range r.byID {
		switch {
		case c.called != 1 || c.returned != 1:
			bad(c, "%d agent.toolCalled and %d agent.toolReturned events, want one of each", c.called, c.returned)
		case c.receipts != 1:
			bad(c, "%d receipts, want 1", c.receipts)
		}
		if c.rec != nil && (c.called == 0 || c.receipt == nil) {
			bad(c, "recorded, but its events or receipt are missing")
		}
		if rc := c.receipt; rc != nil {
			rcpts = append(rcpts, rc)
			if c.called == 1 && rc.RequestedArgsHash != c.argsHash {
				bad(c, "receipt requestedArgsHash %s, event argsHash %s", rc.RequestedArgsHash, c.argsHash)
			}
			if rc.RequestedArgsHash != rc.ExecutedArgsHash && rc.MutationSource == "" {
				bad(c, "requestedArgsHash differs from executedArgsHash without a mutationSource")
			}
			if c.returned == 1 && rc.Status != c.status {
				bad(c, "failure honesty: receipt status %s, event status %s", rc.Status, c.status)
			}
			if (rc.Status == "ok") != (rc.Error == nil) {
				bad(c, "failure honesty: receipt status %s with error %v", rc.Status, rc.Error)
			}
			if rc.DurationMs != nil && rc.Status != "ok" && rc.Status != "error" {
				bad(c, "failure honesty: durationMs with status %s (the tool did not run)", rc.Status)
			}
			if c.returned == 1 && (rc.DurationMs == nil) != (c.durationMs == nil) {
				bad(c, "durationMs present in one of receipt and event only")
			}
		}
		if c.returned == 1 && (c.status == "ok") != (c.errCode == "") {
			bad(c, "failure honesty: event status %s with error code %q", c.status, c.errCode)
		}
		rec := c.rec
		if rec == nil {
			continue
		}
		h, err := red.ArgsHash(rec.Args)
		switch {
		case err != nil:
			bad(c, "stored arguments do not hash: %v", err)
		case h != rec.ArgsHash:
			bad(c, "argsHash %s is not the hash of the stored redacted arguments (%s)", rec.ArgsHash, h)
		case c.called == 1 && h != c.argsHash:
			bad(c, "stored arguments hash to %s, the event's argsHash is %s", h, c.argsHash)
		}
		if rec.Status == "ok" && isErrorResult(rec.Result) {
			bad(c, "failure honesty: an isError result recorded as ok")
		}
		if (rec.Status == "ok") != (rec.Error == nil) {
			bad(c, "failure honesty: recorded status %s with error %v", rec.Status, rec.Error)
		}
		if rc := c.receipt; rc != nil {
			if rec.Status != rc.Status {
				bad(c, "recorded status %s, receipt status %s", rec.Status, rc.Status)
			}
			if rec.ResultHash != rc.ResultHash {
				bad(c, "recorded resultHash %s, receipt resultHash %s", rec.ResultHash, rc.ResultHash)
			}
			if rc.ResultHash != "" && !rec.ResultRedacted && sha256Hex(rec.Result) != rc.ResultHash {
				bad(c, "the stored result hashes to %s, not to the receipt's resultHash %s", sha256Hex(rec.Result), rc.ResultHash)
			}
			if rc.DurationMs != nil && (!rec.Ran || rec.DurationMs != *rc.DurationMs) {
				bad(c, "recorded durationMs %d, receipt %d", rec.DurationMs, *rc.DurationMs)
			}
		}
	}
	g := receipt.BuildGraph(rcpts)
	for _, cyc := range g.Cycles {
		problems = append(problems, fmt.Sprintf("call graph: cycle %s", strings.Join(cyc, " → ")))
	}
	for _, d := range g.Duplicates {
		problems = append(problems, fmt.Sprintf("call graph: call %s has several receipts", d))
	}
	for _, o := range g.Orphans {
		problems = append(problems, fmt.Sprintf("call graph: call %s has parent %s, which is not a call of the run", o, g.Nodes[o].ParentCallID))
	}
	return problems
}

// isErrorResult reports whether b is an MCP CallToolResult with isError
// true.
func isErrorResult(b []byte) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(b, &r) == nil && r.IsError
}

// compareRuns compares a and b call by call and returns the first
// difference, or "".
func compareRuns(a, b *runRecord) string {
	index := func(r *runRecord) map[string]int {
		m := map[string]int{}
		for i, c := range r.calls {
			m[c.callID] = i
		}
		return m
	}
	ia, ib := index(a), index(b)
	parentOf := func(c *runCall, idx map[string]int) int {
		if i, ok := idx[c.parent]; ok {
			return i
		}
		return -1
	}
	resultHash := func(c *runCall) string {
		if c.receipt != nil {
			return c.receipt.ResultHash
		}
		return ""
	}
	// A recorded result the redaction changed is replayed redacted: its
	// replay's resultHash is the hash of the stored (redacted) result.
	sameResult := func(ca, cb *runCall) bool {
		ha, hb := resultHash(ca), resultHash(cb)
		return ha == hb || ca.rec != nil && ca.rec.ResultRedacted && hb == sha256Hex(ca.rec.Result)
	}
	for i := 0; i < len(a.calls) || i < len(b.calls); i++ {
		if i >= len(a.calls) {
			return fmt.Sprintf("call #%d: run %s has no call here; run %s has %s (%s)", i, a.id, b.id, b.calls[i].callID, b.calls[i].toolID)
		}
		if i >= len(b.calls) {
			return fmt.Sprintf("call #%d: run %s has %s (%s); run %s has no call here", i, a.id, a.calls[i].callID, a.calls[i].toolID, b.id)
		}
		ca, cb := a.calls[i], b.calls[i]
		for _, f := range []struct{ name, x, y string }{
			{"toolId", ca.toolID, cb.toolID},
			{"argsHash", ca.argsHash, cb.argsHash},
			{"parent (call #)", fmt.Sprint(parentOf(ca, ia)), fmt.Sprint(parentOf(cb, ib))},
			{"status", ca.status, cb.status},
			{"error code", ca.errCode, cb.errCode},
		} {
			if f.x != f.y {
				return fmt.Sprintf("call #%d: %s differs: run %s call %s has %q, run %s call %s has %q", i, f.name, a.id, ca.callID, f.x, b.id, cb.callID, f.y)
			}
		}
		if !sameResult(ca, cb) {
			return fmt.Sprintf("call #%d: resultHash differs: run %s call %s has %q, run %s call %s has %q", i, a.id, ca.callID, resultHash(ca), b.id, cb.callID, resultHash(cb))
		}
	}
	return ""
}
