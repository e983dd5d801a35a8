package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// testKey is a fixed key so files and fuzz seeds are reproducible.
func testKey() ed25519.PrivateKey { return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)) }

func otherKey() ed25519.PrivateKey { return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)) }

var t0 = time.Date(2026, 11, 29, 15, 4, 5, 123_000_000, time.UTC)

// fixedClock returns t0 + 1 s, + 2 s, … on successive calls.
func fixedClock() func() time.Time {
	n := 0
	return func() time.Time { n++; return t0.Add(time.Duration(n) * time.Second) }
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func ms(n int64) *int64 { return &n }

// call returns a valid receipt for call id with the given status; the other
// fields follow the status (CONTRACT.md §F).
func call(id, status string) *Receipt {
	r := &Receipt{
		ReceiptID: "rcpt_" + id, CallID: id, RunID: "run_1", AgentID: "agent.planner",
		Principal: "alice", Tenant: "acme", ToolID: "mcp:fs.read_file", Transport: "mcp",
		Decision:          Decision{Effect: "allow", RuleID: "readers", PolicyVersion: "v3"},
		RequestedArgsHash: sha("args " + id), ExecutedArgsHash: sha("args " + id),
		Status: status, StartedAt: t0,
	}
	switch status {
	case StatusOK:
		r.DurationMs, r.ResultHash = ms(42), sha("result "+id)
	case StatusError:
		r.DurationMs, r.Error = ms(7), &ErrorRef{Code: "tool_execution_failed"}
	case StatusForbidden:
		r.Decision.Effect, r.Decision.RuleID, r.Error = "deny", "no-etc", &ErrorRef{Code: "forbidden"}
	case StatusRateLimited:
		r.Error = &ErrorRef{Code: "rate_limited"}
	}
	return r
}

// sampleCalls is the round-trip set: every status, both error shapes, a
// mutation, an approval, nesting (children before parents, as calls finish),
// an orphan, every optional field at least once, and empty strings.
func sampleCalls() []*Receipt {
	grandchild := call("call_c", StatusError) // tool failed: error + durationMs
	grandchild.ParentCallID = "call_b"
	grandchild.Transport = "native"
	child := call("call_b", StatusOK)
	child.ParentCallID = "call_a"
	child.ToolID = "http:search"
	child.Transport = "http"
	root := call("call_a", StatusOK)
	upstreamDown := call("call_d", StatusError) // never ran: error, no durationMs
	upstreamDown.DurationMs, upstreamDown.Error = nil, &ErrorRef{Code: "upstream_unavailable"}
	forbidden := call("call_e", StatusForbidden)
	limited := call("call_f", StatusRateLimited)
	mutated := call("call_g", StatusOK)
	mutated.ExecutedArgsHash, mutated.MutationSource = sha("rewritten"), "hook:redact-paths"
	approved := call("call_h", StatusOK)
	approved.Decision.Effect, approved.ApprovalID = "require_approval", "appr_1"
	orphan := call("call_i", StatusOK)
	orphan.ParentCallID = "call_elsewhere"
	bare := call("call_j", StatusOK) // empty tenant, rule id and policy version; no result hash
	bare.Tenant, bare.Decision.RuleID, bare.Decision.PolicyVersion, bare.ResultHash = "", "", "", ""
	bare.AgentID, bare.Principal = "core.system", "core.system"
	rs := []*Receipt{grandchild, child, root, upstreamDown, forbidden, limited, mutated, approved, orphan, bare}
	for i, r := range rs {
		r.StartedAt = t0.Add(time.Duration(i) * 1500 * time.Millisecond)
	}
	return rs
}

// item is one line of a built file.
type item struct {
	kind string // KindReceipt or KindCheckpoint
	seq  uint64
}

// buildFile appends rs to a new chain over testKey, writing a checkpoint
// after each index in cpAfter and a final one, and returns the file.
func buildFile(t testing.TB, rs []*Receipt, opts Options, cpAfter ...int) ([]byte, []item) {
	t.Helper()
	if opts.Now == nil {
		opts.Now = fixedClock()
	}
	c := NewChain(NewSigner(testKey()), opts)
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var items []item
	checkpoint := func() {
		if cp, ok := c.Checkpoint(); ok {
			if err := w.WriteCheckpoint(cp); err != nil {
				t.Fatal(err)
			}
			items = append(items, item{KindCheckpoint, cp.Seq})
		}
	}
	for i, r := range rs {
		if err := c.AppendWith(r, w.WriteReceipt); err != nil {
			t.Fatalf("append %s: %v", r.CallID, err)
		}
		items = append(items, item{KindReceipt, r.Seq})
		for _, j := range cpAfter {
			if i == j {
				checkpoint()
			}
		}
	}
	checkpoint()
	return buf.Bytes(), items
}

func splitFile(data []byte) [][]byte {
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = append([]byte(nil), l...)
	}
	return out
}

func joinFile(lines [][]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func verifyBytes(data []byte, pub ed25519.PublicKey, opts VerifyOptions) (*Report, error) {
	return Verify(bytes.NewReader(data), pub, opts)
}

// wantVerifyError asserts err is a *VerifyError with the given fields
// (reason "" matches any reason).
func wantVerifyError(t *testing.T, err error, kind string, seq uint64, line int, reason string) *VerifyError {
	t.Helper()
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("got error %v, want a *VerifyError", err)
	}
	if ve.Kind != kind || (kind != KindLine && ve.Seq != seq) || ve.Line != line || (reason != "" && ve.Reason != reason) {
		t.Fatalf("got %q (kind %s seq %d line %d reason %q), want kind %s seq %d line %d reason %q",
			ve.Error(), ve.Kind, ve.Seq, ve.Line, ve.Reason, kind, seq, line, reason)
	}
	return ve
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// must returns v, panicking (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
