package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

func TestRoundTrip(t *testing.T) {
	for _, signEach := range []bool{false, true} {
		t.Run(map[bool]string{false: "checkpoints", true: "signEach"}[signEach], func(t *testing.T) {
			rs := sampleCalls()
			data, items := buildFile(t, rs, Options{SignEach: signEach}, 4)
			if len(items) != 12 || items[5] != (item{KindCheckpoint, 4}) || items[11] != (item{KindCheckpoint, 9}) {
				t.Fatalf("items = %v", items)
			}
			signer := NewSigner(testKey())
			for i, r := range rs {
				if r.V != 1 || r.Seq != uint64(i) || r.ChainID != signer.KeyID() {
					t.Fatalf("receipt %d: v=%d seq=%d chainId=%q", i, r.V, r.Seq, r.ChainID)
				}
				wantPrev := ZeroHash
				if i > 0 {
					wantPrev = rs[i-1].Hash
				}
				if r.PrevHash != wantPrev {
					t.Fatalf("receipt %d: prevHash %s, want %s", i, r.PrevHash, wantPrev)
				}
				if h := must(Hash(r)); h != r.Hash {
					t.Fatalf("receipt %d: Hash() = %s, r.Hash = %s", i, h, r.Hash)
				}
				if (r.Sig != "") != signEach {
					t.Fatalf("receipt %d: sig %q with SignEach=%v", i, r.Sig, signEach)
				}
			}

			rep, err := verifyBytes(data, signer.PublicKey(), VerifyOptions{})
			if err != nil {
				t.Fatalf("Verify: %v\n%s", err, data)
			}
			if rep.Receipts != 10 || rep.Checkpoints != 2 || !slices.Equal(rep.Chains, []string{signer.KeyID()}) {
				t.Fatalf("report = %+v", rep)
			}
			head := ChainHead{ChainID: signer.KeyID(), Receipts: 10, First: 0, Seq: 9, Hash: rs[9].Hash, Signed: 9}
			if len(rep.Heads) != 1 || rep.Heads[0] != head {
				t.Fatalf("heads = %+v, want %+v", rep.Heads, head)
			}

			g := rep.Graph
			if want := []string{"call_a", "call_d", "call_e", "call_f", "call_g", "call_h", "call_j"}; !slices.Equal(g.Roots, want) {
				t.Errorf("roots = %v, want %v", g.Roots, want)
			}
			if !slices.Equal(g.Children("call_a"), []string{"call_b"}) || !slices.Equal(g.Children("call_b"), []string{"call_c"}) ||
				g.Children("call_c") != nil || g.Children("call_d") != nil {
				t.Errorf("children: a=%v b=%v c=%v", g.Children("call_a"), g.Children("call_b"), g.Children("call_c"))
			}
			if !slices.Equal(g.Orphans, []string{"call_i"}) || g.Cycles != nil || g.Duplicates != nil || len(g.Nodes) != 10 {
				t.Errorf("orphans=%v cycles=%v duplicates=%v nodes=%d", g.Orphans, g.Cycles, g.Duplicates, len(g.Nodes))
			}
			if n := g.Nodes["call_c"]; n.Seq != 0 || n.Status != StatusError || n.ToolID != "mcp:fs.read_file" || n.ChainID != signer.KeyID() {
				t.Errorf("node call_c = %+v", n)
			}
			// BuildGraph over the in-memory receipts gives the same graph.
			if g2 := BuildGraph(rs); !slices.Equal(g2.Roots, g.Roots) || !slices.Equal(g2.Orphans, g.Orphans) {
				t.Errorf("BuildGraph differs: %+v", g2)
			}
		})
	}
}

func TestLineFormat(t *testing.T) {
	rs := sampleCalls()[:1]
	data, _ := buildFile(t, rs, Options{})
	lines := splitFile(data)
	if len(lines) != 2 || !bytes.HasSuffix(data, []byte("}\n")) {
		t.Fatalf("file = %s", data)
	}
	kid := NewSigner(testKey()).KeyID()
	want := `{"agentId":"agent.planner","callId":"call_c","chainId":"` + kid + `","decision":{"effect":"allow","policyVersion":"v3","ruleId":"readers"},` +
		`"durationMs":7,"error":{"code":"tool_execution_failed"},"executedArgsHash":"` + sha("args call_c") + `","hash":"` + rs[0].Hash + `",` +
		`"parentCallId":"call_b","prevHash":"` + ZeroHash + `","principal":"alice","receiptId":"rcpt_call_c",` +
		`"requestedArgsHash":"` + sha("args call_c") + `","runId":"run_1","seq":0,"startedAt":"2026-11-29T15:04:05.123Z",` +
		`"status":"error","tenant":"acme","toolId":"mcp:fs.read_file","transport":"native","v":1}`
	if string(lines[0]) != want {
		t.Fatalf("receipt line\n got %s\nwant %s", lines[0], want)
	}
	wantCP := `{"checkpoint":{"chainId":"` + kid + `","hash":"` + rs[0].Hash + `","seq":0,"signedAt":"2026-11-29T15:04:06.123Z","v":1},"sig":"`
	if !strings.HasPrefix(string(lines[1]), wantCP) || len(lines[1]) != len(wantCP)+86+2 {
		t.Fatalf("checkpoint line\n got %s\nwant %s<86 chars>\"}", lines[1], wantCP)
	}
	if !strings.HasPrefix(kid, "ed25519:") || len(kid) != 8+16 {
		t.Fatalf("key id %q", kid)
	}
}

func TestAppendRefusesInvalid(t *testing.T) {
	mut := func(f func(r *Receipt)) *Receipt { r := call("c1", StatusOK); f(r); return r }
	cases := []struct {
		name   string
		r      *Receipt
		reason string
	}{
		{"error with status ok", mut(func(r *Receipt) { r.Error = &ErrorRef{Code: "timeout"} }), "failure honesty: error with status ok"},
		{"forbidden with durationMs", mut(func(r *Receipt) {
			r.Status, r.Error, r.DurationMs = StatusForbidden, &ErrorRef{Code: "forbidden"}, ms(3)
		}), "failure honesty: durationMs with status forbidden"},
		{"rate_limited with durationMs", mut(func(r *Receipt) {
			r.Status, r.Error, r.DurationMs = StatusRateLimited, &ErrorRef{Code: "rate_limited"}, ms(0)
		}), "failure honesty: durationMs with status rate_limited"},
		{"error without code", mut(func(r *Receipt) { r.Status, r.Error = StatusError, &ErrorRef{} }), "failure honesty: error without code"},
		{"error status without error", mut(func(r *Receipt) { r.Status = StatusError }), "failure honesty: status error without error"},
		{"forbidden without error", mut(func(r *Receipt) { r.Status, r.DurationMs = StatusForbidden, nil }), "failure honesty: status forbidden without error"},
		{"status weird", mut(func(r *Receipt) { r.Status = "weird" }), "failure honesty: unknown status"},
		{"status empty", mut(func(r *Receipt) { r.Status = "" }), "failure honesty: unknown status"},
		{"args mutated without source", mut(func(r *Receipt) { r.ExecutedArgsHash = sha("other") }), ReasonArgsMismatch},
		{"negative durationMs", mut(func(r *Receipt) { r.DurationMs = ms(-1) }), ReasonMalformed},
		{"huge durationMs", mut(func(r *Receipt) { r.DurationMs = ms(MaxSafeInteger + 1) }), ReasonMalformed},
		{"missing callId", mut(func(r *Receipt) { r.CallID = "" }), ReasonMalformed},
		{"missing receiptId", mut(func(r *Receipt) { r.ReceiptID = "" }), ReasonMalformed},
		{"missing principal", mut(func(r *Receipt) { r.Principal = "" }), ReasonMalformed},
		{"self parent", mut(func(r *Receipt) { r.ParentCallID = r.CallID }), ReasonMalformed},
		{"bad transport", mut(func(r *Receipt) { r.Transport = "grpc" }), ReasonMalformed},
		{"bad effect", mut(func(r *Receipt) { r.Decision.Effect = "maybe" }), ReasonMalformed},
		{"uppercase args hash", mut(func(r *Receipt) { r.RequestedArgsHash = strings.ToUpper(r.RequestedArgsHash) }), ReasonMalformed},
		{"short result hash", mut(func(r *Receipt) { r.ResultHash = "abc" }), ReasonMalformed},
		{"no startedAt", mut(func(r *Receipt) { r.StartedAt = time.Time{} }), ReasonMalformed},
		{"invalid UTF-8", mut(func(r *Receipt) { r.ToolID = "mcp:fs.\xff" }), ReasonMalformed},
	}
	c := NewChain(NewSigner(testKey()), Options{})
	if err := c.Append(call("c0", StatusOK)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			committed := false
			err := c.AppendWith(tc.r, func(*Receipt) error { committed = true; return nil })
			if errcode.CodeOf(err) != errcode.InvalidArgument {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
			if e := errcode.As(err); e.Details["reason"] != tc.reason {
				t.Fatalf("reason = %v, want %q (%v)", e.Details["reason"], tc.reason, err)
			}
			if committed || tc.r.Hash != "" {
				t.Fatal("an invalid receipt was linked")
			}
			if seq, _, _ := c.Head(); seq != 0 {
				t.Fatalf("head moved to %d", seq)
			}
		})
	}
	if err := c.Append(nil); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("Append(nil) = %v", err)
	}
	// The chain still continues at seq 1.
	r := call("c2", StatusOK)
	if err := c.Append(r); err != nil || r.Seq != 1 {
		t.Fatalf("append after refusals: seq %d, %v", r.Seq, err)
	}
}

func TestAppendNormalises(t *testing.T) {
	c := NewChain(NewSigner(testKey()), Options{})
	r := call("c1", StatusOK)
	r.StartedAt = time.Date(2026, 1, 2, 3, 4, 5, 987_654_321, time.FixedZone("X", 3600))
	r.Sig, r.V, r.ChainID = "stale", 7, "someone-else"
	if err := c.Append(r); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 2, 2, 4, 5, 987_000_000, time.UTC); !r.StartedAt.Equal(want) || r.StartedAt.Location() != time.UTC {
		t.Fatalf("startedAt = %v, want %v", r.StartedAt, want)
	}
	if r.Sig != "" || r.V != 1 || r.ChainID != c.ID() {
		t.Fatalf("sig=%q v=%d chainId=%q", r.Sig, r.V, r.ChainID)
	}
}

func TestAppendWithCommitFailure(t *testing.T) {
	c := NewChain(NewSigner(testKey()), Options{SignEach: true})
	first := call("c0", StatusOK)
	if err := c.Append(first); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	r := call("c1", StatusOK)
	var seen Receipt
	err := c.AppendWith(r, func(r *Receipt) error { seen = *r; return boom })
	if err != boom {
		t.Fatalf("err = %v, want the commit error unchanged", err)
	}
	if seen.Seq != 1 || seen.PrevHash != first.Hash || seen.Sig == "" {
		t.Fatalf("commit saw seq %d prev %s sig %q", seen.Seq, seen.PrevHash, seen.Sig)
	}
	if r.Hash != "" || r.Seq != 0 || r.Sig != "" {
		t.Fatalf("failed receipt keeps chain fields: %+v", r)
	}
	if seq, h, _ := c.Head(); seq != 0 || h != first.Hash {
		t.Fatalf("head = %d %s", seq, h)
	}
	r2 := call("c2", StatusOK)
	if err := c.Append(r2); err != nil || r2.Seq != 1 || r2.PrevHash != first.Hash {
		t.Fatalf("next append: seq %d prev %s err %v", r2.Seq, r2.PrevHash, err)
	}
}

func TestCheckpointOnlyWhenHeadMoves(t *testing.T) {
	c := NewChain(NewSigner(testKey()), Options{Now: fixedClock()})
	if _, _, ok := c.Head(); ok {
		t.Fatal("empty chain has a head")
	}
	if cp, ok := c.Checkpoint(); ok || cp != nil {
		t.Fatal("checkpoint of an empty chain")
	}
	r := call("c0", StatusOK)
	if err := c.Append(r); err != nil {
		t.Fatal(err)
	}
	cp, ok := c.Checkpoint()
	if !ok || cp.Seq != 0 || cp.Hash != r.Hash || cp.V != 1 || cp.ChainID != c.ID() || !cp.SignedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("checkpoint = %+v", cp)
	}
	if err := VerifyCheckpoint(cp, NewSigner(testKey()).PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := VerifyCheckpoint(cp, pubOf(otherKey())); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("other key: %v", err)
	}
	bad := *cp
	bad.Seq = 1
	if err := VerifyCheckpoint(&bad, NewSigner(testKey()).PublicKey()); err == nil || !strings.Contains(err.Error(), ReasonBadSignature) {
		t.Fatalf("tampered checkpoint: %v", err)
	}
	if _, ok := c.Checkpoint(); ok {
		t.Fatal("second checkpoint without new receipts")
	}
}

func TestResumeChain(t *testing.T) {
	s := NewSigner(testKey())
	rs := sampleCalls()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	c1 := NewChain(s, Options{})
	for _, r := range rs[:4] {
		if err := c1.AppendWith(r, w.WriteReceipt); err != nil {
			t.Fatal(err)
		}
	}
	cp, _ := c1.Checkpoint()
	noErr(t, w.WriteCheckpoint(cp))

	// "Restart": decode the stored head and continue.
	var head Receipt
	noErr(t, json.Unmarshal(must(json.Marshal(rs[3])), &head))
	c2, err := ResumeChain(s, &head, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if seq, h, ok := c2.Head(); !ok || seq != 3 || h != rs[3].Hash {
		t.Fatalf("resumed head %d %s", seq, h)
	}
	for _, r := range rs[4:] {
		if err := c2.AppendWith(r, w.WriteReceipt); err != nil {
			t.Fatal(err)
		}
	}
	cp, _ = c2.Checkpoint()
	noErr(t, w.WriteCheckpoint(cp))
	if rs[4].Seq != 4 || rs[4].PrevHash != rs[3].Hash {
		t.Fatalf("resumed receipt seq %d prev %s", rs[4].Seq, rs[4].PrevHash)
	}
	rep, err := verifyBytes(buf.Bytes(), s.PublicKey(), VerifyOptions{})
	if err != nil || rep.Receipts != 10 {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	if c, err := ResumeChain(s, nil, Options{}); err != nil || c == nil {
		t.Fatalf("nil head: %v", err)
	}
	tampered := head
	tampered.ToolID = "mcp:fs.write_file"
	if _, err := ResumeChain(s, &tampered, Options{}); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("tampered head: %v", err)
	}
	if _, err := ResumeChain(NewSigner(otherKey()), &head, Options{}); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("other chain: %v", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	rs := sampleCalls()
	buildFile(t, rs, Options{SignEach: true})
	for _, r := range rs {
		data := must(json.Marshal(r))
		var back Receipt
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if !reflectEqualReceipt(r, &back) {
			t.Fatalf("round trip differs:\n%+v\n%+v", r, back)
		}
	}
	// Held by value in another struct, a receipt still marshals canonically.
	wrapped := must(json.Marshal(struct{ R Receipt }{*rs[0]}))
	if want := `{"R":` + string(must(rs[0].MarshalJSON())) + `}`; string(wrapped) != want {
		t.Fatalf("by value:\n got %s\nwant %s", wrapped, want)
	}
	var r Receipt
	if err := json.Unmarshal([]byte(`{"callId":"x","extra":1}`), &r); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("unknown field: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"startedAt":"yesterday"}`), &r); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("bad time: %v", err)
	}
	c := NewChain(NewSigner(testKey()), Options{Now: fixedClock()})
	noErr(t, c.Append(call("x", StatusOK)))
	cp, _ := c.Checkpoint()
	var cpBack Checkpoint
	if err := json.Unmarshal(must(json.Marshal(cp)), &cpBack); err != nil || cpBack != *cp {
		t.Fatalf("checkpoint round trip: %v\n%+v\n%+v", err, cpBack, *cp)
	}
	if err := json.Unmarshal([]byte(`{"sig":"x"}`), &cpBack); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("missing checkpoint object: %v", err)
	}
}

func reflectEqualReceipt(a, b *Receipt) bool {
	ja, _ := a.MarshalJSON()
	jb, _ := b.MarshalJSON()
	return bytes.Equal(ja, jb) && a.StartedAt.Equal(b.StartedAt) && a.Hash == b.Hash && a.Sig == b.Sig
}

func TestHashAndWriterRefuseUnencodable(t *testing.T) {
	r := call("c", StatusOK)
	r.Principal = "\xc3"
	if _, err := Hash(r); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("Hash: %v", err)
	}
	if _, err := Hash(nil); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("Hash(nil): %v", err)
	}
	if _, err := r.MarshalJSON(); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("MarshalJSON: %v", err)
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteReceipt(call("unlinked", StatusOK)); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("unlinked: %v", err)
	}
	if err := w.WriteCheckpoint(&Checkpoint{}); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("unsigned checkpoint: %v", err)
	}
	r.Principal, r.Hash = "alice", "x"
	r.Seq = MaxSafeInteger + 1
	if err := w.WriteReceipt(r); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("huge seq: %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
}

type failWriter struct{ n int }

func (f failWriter) Write(p []byte) (int, error) {
	if f.n >= 0 {
		return f.n, nil
	}
	return 0, errors.New("no space")
}

func TestWriterErrors(t *testing.T) {
	rs := sampleCalls()[:1]
	buildFile(t, rs, Options{})
	for _, fw := range []failWriter{{n: -1}, {n: 3}} {
		err := NewWriter(fw).WriteReceipt(rs[0])
		if errcode.CodeOf(err) != errcode.AuditUnavailable {
			t.Fatalf("write error: %v", err)
		}
	}
}
