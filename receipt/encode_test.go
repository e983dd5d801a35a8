package receipt

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/canonjson"
)

// alphabet mixes ASCII, every kind of JSON escape, HTML-sensitive
// characters, DEL, U+2028/U+2029 (which encoding/json escapes and RFC 8785
// does not), and 2-, 3- and 4-byte UTF-8.
var alphabet = []rune("aZ09 _-:./<>&'\"\\\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f\u0080\u00e9\u00a0\u2028\u2029\u20ac\ufeff\ue000\uffff\U0001F600\U0010FFFF")

func randString(rng *rand.Rand, maxLen int) string {
	var b strings.Builder
	for range rng.IntN(maxLen + 1) {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

func randReceipt(rng *rand.Rand) *Receipt {
	opt := func(s string) string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return s
	}
	r := &Receipt{
		V: 1, ChainID: randString(rng, 8), Seq: rng.Uint64N(MaxSafeInteger + 1), PrevHash: randString(rng, 8),
		ReceiptID: randString(rng, 8), CallID: randString(rng, 8), ParentCallID: opt(randString(rng, 8)),
		RunID: randString(rng, 8), AgentID: randString(rng, 8), Principal: randString(rng, 8),
		Tenant: randString(rng, 8), ToolID: randString(rng, 8), Transport: randString(rng, 8),
		Decision:          Decision{Effect: randString(rng, 8), RuleID: randString(rng, 8), PolicyVersion: randString(rng, 8)},
		RequestedArgsHash: randString(rng, 8), ExecutedArgsHash: randString(rng, 8),
		MutationSource: opt(randString(rng, 8)), Status: randString(rng, 8), ResultHash: opt(randString(rng, 8)),
		StartedAt:  time.UnixMilli(rng.Int64N(253402300800000+62135596800000) - 62135596800000).UTC(), // years 0001–9999
		ApprovalID: opt(randString(rng, 8)), ToolDigest: opt(randString(rng, 8)), Hash: randString(rng, 8), Sig: opt(randString(rng, 8)),
	}
	if rng.IntN(2) == 0 {
		r.Error = &ErrorRef{Code: randString(rng, 8)}
	}
	if rng.IntN(2) == 0 {
		d := rng.Int64N(MaxSafeInteger + 1)
		if rng.IntN(4) == 0 {
			d = rng.Int64N(10)
		}
		r.DurationMs = &d
	}
	if rng.IntN(4) == 0 {
		r.Seq = rng.Uint64N(3)
	}
	return r
}

// referenceBody is an independent description of the receipt JSON shape,
// encoded with encoding/json and canonicalised by internal/canonjson.
func referenceBody(r *Receipt, line bool) map[string]any {
	m := map[string]any{
		"v": r.V, "chainId": r.ChainID, "seq": r.Seq, "prevHash": r.PrevHash, "receiptId": r.ReceiptID,
		"callId": r.CallID, "runId": r.RunID, "agentId": r.AgentID, "principal": r.Principal,
		"tenant": r.Tenant, "toolId": r.ToolID, "transport": r.Transport,
		"decision":          map[string]any{"effect": r.Decision.Effect, "ruleId": r.Decision.RuleID, "policyVersion": r.Decision.PolicyVersion},
		"requestedArgsHash": r.RequestedArgsHash, "executedArgsHash": r.ExecutedArgsHash, "status": r.Status,
		"startedAt": r.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	for k, v := range map[string]string{"parentCallId": r.ParentCallID, "mutationSource": r.MutationSource, "resultHash": r.ResultHash, "approvalId": r.ApprovalID, "toolDigest": r.ToolDigest} {
		if v != "" {
			m[k] = v
		}
	}
	if r.Error != nil {
		m["error"] = map[string]any{"code": r.Error.Code}
	}
	if r.DurationMs != nil {
		m["durationMs"] = *r.DurationMs
	}
	if line {
		m["hash"] = r.Hash
		if r.Sig != "" {
			m["sig"] = r.Sig
		}
	}
	return m
}

func canonical(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := canonjson.Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEncodeMatchesCanonjson checks the direct canonical encoder against
// canonjson.Canonicalize(json.Marshal(body)) over randomized receipts.
func TestEncodeMatchesCanonjson(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		r := randReceipt(rng)
		for _, line := range []bool{false, true} {
			got := appendReceipt(nil, r, line, nil)
			want := canonical(t, referenceBody(r, line))
			if !bytes.Equal(got, want) {
				t.Fatalf("receipt %d (line=%v):\n got %s\nwant %s", i, line, got, want)
			}
		}
		var back Receipt
		if err := back.UnmarshalJSON(appendReceipt(nil, r, true, nil)); err != nil {
			t.Fatalf("receipt %d: decode own output: %v", i, err)
		}
		if !bytes.Equal(appendReceipt(nil, &back, true, nil), appendReceipt(nil, r, true, nil)) {
			t.Fatalf("receipt %d: decode/encode round trip differs", i)
		}

		cp := &Checkpoint{V: 1, ChainID: r.ChainID, Seq: r.Seq, Hash: r.Hash, SignedAt: r.StartedAt, Sig: r.PrevHash}
		wantCP := canonical(t, map[string]any{
			"checkpoint": map[string]any{"v": 1, "chainId": cp.ChainID, "seq": cp.Seq, "hash": cp.Hash,
				"signedAt": cp.SignedAt.Format("2006-01-02T15:04:05.000Z07:00")},
			"sig": cp.Sig,
		})
		if got := appendCheckpointLine(nil, cp); !bytes.Equal(got, wantCP) {
			t.Fatalf("checkpoint %d:\n got %s\nwant %s", i, got, wantCP)
		}
	}
}

// TestEncodeLineSeparators pins RFC 8785 §3.2.2.2 where encoding/json
// differs: U+2028 and U+2029 are not escaped, nor are '<', '>', '&' or DEL;
// control characters use the two-character escapes or \u00xx in lowercase.
func TestEncodeLineSeparators(t *testing.T) {
	for in, want := range map[string]string{
		"a\u2028b\u2029c":          "\"a\u2028b\u2029c\"",
		"<&>\x7f/":                 `"<&>` + "\x7f" + `/"`,
		"\b\t\n\f\r":               `"\b\t\n\f\r"`,
		"\x00\x01\x0b\x1f":         `"\u0000\u0001\u000b\u001f"`,
		`"\`:                       `"\"\\"`,
		"\U0001F600\u00e9\ufeff":   "\"\U0001F600\u00e9\ufeff\"",
		"":                         `""`,
		"plain ascii text, 123 ok": `"plain ascii text, 123 ok"`,
	} {
		r := call("c-1", StatusOK)
		r.AgentID = in
		line, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(line, []byte(`"agentId":`+want+`,`)) {
			t.Errorf("agentId %q encodes as %s, want %s", in, line, want)
		}
	}
}

// TestAppendPlaceholders checks that Append's split encoding (placeholders
// for seq and prevHash, filled under the lock) hashes exactly what Hash
// computes from the finished receipt, for seqs of every width.
func TestAppendPlaceholders(t *testing.T) {
	s := NewSigner(testKey())
	for _, start := range []uint64{0, 9, 99, 12345, MaxSafeInteger - 3} {
		head := call("seed", StatusOK)
		head.V, head.ChainID, head.Seq, head.PrevHash = 1, s.KeyID(), start, sha("prev")
		head.Hash = must(Hash(head))
		c, err := ResumeChain(s, head, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range sampleCalls()[:3] {
			if err := c.Append(r); err != nil {
				t.Fatal(err)
			}
			if r.Seq != start+1+uint64(i) || must(Hash(r)) != r.Hash {
				t.Fatalf("start %d: seq %d, hash %s, Hash() %s", start, r.Seq, r.Hash, must(Hash(r)))
			}
		}
		if start == MaxSafeInteger-3 {
			if err := c.Append(call("overflow", StatusOK)); err == nil {
				t.Fatal("append beyond 2^53−1 accepted")
			}
		}
	}
}

// TestAppendTime checks the hand-written timestamp encoder against
// time.Time.AppendFormat.
func TestAppendTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	times := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 11, 29, 15, 4, 5, 123456789, time.FixedZone("x", -7*3600)), time.Unix(0, 0),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for range 10000 {
		times = append(times, time.Unix(rng.Int64N(253402300800), rng.Int64N(1e9)))
	}
	for _, tm := range times {
		want := `"` + tm.UTC().Truncate(time.Millisecond).Format(timeLayout) + `"`
		if got := string(appendTime(nil, tm)); got != want {
			t.Fatalf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}
