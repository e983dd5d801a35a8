package receipt

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// span is one leaf value of a JSON line: its dotted path and the bytes of
// the value (a string's content without the quotes, or a number's digits).
type span struct {
	path       string
	start, end int
	number     bool
}

// valueSpans locates every leaf value of a JSON object line. It handles the
// shapes receipt lines use: objects, strings (with escapes) and integers.
func valueSpans(line []byte) ([]span, error) {
	s := &spanScanner{b: line}
	var out []span
	if err := s.object("", &out); err != nil {
		return nil, err
	}
	if s.i != len(line) {
		return nil, fmt.Errorf("trailing bytes at %d", s.i)
	}
	return out, nil
}

type spanScanner struct {
	b []byte
	i int
}

func (s *spanScanner) expect(c byte) error {
	if s.i >= len(s.b) || s.b[s.i] != c {
		return fmt.Errorf("want %q at %d", c, s.i)
	}
	s.i++
	return nil
}

// str reads a string and returns its content bounds.
func (s *spanScanner) str() (int, int, error) {
	if err := s.expect('"'); err != nil {
		return 0, 0, err
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	end := s.i
	return start, end, s.expect('"')
}

func (s *spanScanner) object(prefix string, out *[]span) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	for {
		ks, ke, err := s.str()
		if err != nil {
			return err
		}
		path := string(s.b[ks:ke])
		if prefix != "" {
			path = prefix + "." + path
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		switch {
		case s.i < len(s.b) && s.b[s.i] == '{':
			if err := s.object(path, out); err != nil {
				return err
			}
		case s.i < len(s.b) && s.b[s.i] == '"':
			vs, ve, err := s.str()
			if err != nil {
				return err
			}
			*out = append(*out, span{path, vs, ve, false})
		default:
			start := s.i
			for s.i < len(s.b) && (s.b[s.i] >= '0' && s.b[s.i] <= '9' || s.b[s.i] == '-') {
				s.i++
			}
			if s.i == start {
				return fmt.Errorf("unexpected value at %d", s.i)
			}
			*out = append(*out, span{path, start, s.i, true})
		}
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		return s.expect('}')
	}
}

// flipPositions returns the byte positions of sp to tamper with: the first,
// middle and last character outside escape sequences (for a number, its
// last digit and, when it has several, its first).
func flipPositions(line []byte, sp span) []int {
	if sp.number {
		pos := []int{sp.end - 1}
		if sp.end-sp.start > 1 {
			pos = append(pos, sp.start)
		}
		return pos
	}
	var cand []int
	for i := sp.start; i < sp.end; i++ {
		if line[i] == '\\' {
			if line[i+1] == 'u' {
				i += 5
			} else {
				i++
			}
			continue
		}
		cand = append(cand, i)
	}
	if len(cand) == 0 {
		return nil
	}
	pos := []int{cand[0], cand[len(cand)/2], cand[len(cand)-1]}
	slices.Sort(pos)
	return slices.Compact(pos)
}

// flip changes c to another character of the same class, so the line stays
// valid JSON: a digit to another digit (never a leading zero of a number),
// a hex letter to another hex letter, another letter to another letter,
// '-' and '_' to each other, and other punctuation to 'x'.
func flip(c byte, leadingDigit bool) byte {
	switch {
	case c >= '0' && c <= '9':
		d := '0' + (c-'0'+1)%10
		if leadingDigit && d == '0' {
			d = '1'
		}
		return d
	case c >= 'a' && c <= 'f':
		return 'a' + (c-'a'+1)%6
	case c >= 'g' && c <= 'z':
		return 'g' + (c-'g'+1)%20
	case c >= 'A' && c <= 'Z':
		return 'A' + (c-'A'+1)%26
	case c == '-':
		return '_'
	case c == '_':
		return '-'
	default:
		return 'x'
	}
}

// receiptFields and checkpointFields are every field path of the two line
// kinds; the tampering test must touch each of them.
var (
	receiptFields = []string{
		"agentId", "approvalId", "callId", "chainId", "decision.effect", "decision.policyVersion", "decision.ruleId",
		"durationMs", "error.code", "executedArgsHash", "hash", "mutationSource", "parentCallId", "prevHash",
		"principal", "receiptId", "requestedArgsHash", "resultHash", "runId", "seq", "sig", "startedAt", "status",
		"tenant", "toolId", "transport", "v",
	}
	checkpointFields = []string{
		"checkpoint.chainId", "checkpoint.hash", "checkpoint.seq", "checkpoint.signedAt", "checkpoint.v", "sig",
	}
)

// TestTamperEveryField is the acceptance criterion of DESIGN.md §Receipts:
// changing one byte of any field of any line fails verification, naming
// the tampered line and its seq.
func TestTamperEveryField(t *testing.T) {
	pub := pubOf(testKey())
	for _, signEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("signEach=%v", signEach), func(t *testing.T) {
			data, items := buildFile(t, sampleCalls(), Options{SignEach: signEach}, 2, 6)
			if _, err := verifyBytes(data, pub, VerifyOptions{}); err != nil {
				t.Fatalf("untampered file: %v", err)
			}
			lines := splitFile(data)
			touched := map[string]map[string]bool{KindReceipt: {}, KindCheckpoint: {}}
			reasons := map[string]int{}
			flips := 0
			for li, line := range lines {
				it := items[li]
				spans, err := valueSpans(line)
				if err != nil {
					t.Fatalf("line %d: %v", li+1, err)
				}
				for _, sp := range spans {
					for _, pos := range flipPositions(line, sp) {
						tampered := slices.Clone(lines)
						tampered[li] = slices.Clone(line)
						tampered[li][pos] = flip(line[pos], sp.number && pos == sp.start && sp.end-sp.start > 1)
						_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
						if err == nil {
							t.Fatalf("line %d field %s byte %d (%q→%q): verification passed", li+1, sp.path, pos-sp.start, line[pos], tampered[li][pos])
						}
						ve := wantVerifyError(t, err, it.kind, it.seq, li+1, "")
						if !stableReason(ve.Reason) {
							t.Fatalf("unstable reason %q", ve.Reason)
						}
						touched[it.kind][sp.path] = true
						reasons[ve.Reason]++
						flips++
					}
				}
			}
			want := map[string][]string{KindReceipt: receiptFields, KindCheckpoint: checkpointFields}
			for kind, fields := range want {
				for _, f := range fields {
					if f == "sig" && kind == KindReceipt && !signEach {
						continue
					}
					if !touched[kind][f] {
						t.Errorf("%s field %s was never tampered with", kind, f)
					}
				}
			}
			t.Logf("%d single-byte tamperings over %d lines all detected; reasons: %v", flips, len(lines), reasons)
		})
	}
}

func stableReason(r string) bool {
	switch r {
	case ReasonMalformed, ReasonBadSignature, ReasonBrokenChain, ReasonGap, ReasonReorder, ReasonFork,
		ReasonDuplicate, ReasonHashMismatch, ReasonUncovered, ReasonArgsMismatch:
		return true
	}
	return strings.HasPrefix(r, "failure honesty: ")
}

func TestTamperStructure(t *testing.T) {
	pub := pubOf(testKey())
	data, items := buildFile(t, sampleCalls(), Options{}, 4) // r0..r4 cp4 r5..r9 cp9
	lines := splitFile(data)
	last := len(lines) - 1

	t.Run("delete each line", func(t *testing.T) {
		for li := range lines {
			tampered := slices.Delete(slices.Clone(lines), li, li+1)
			_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
			it := items[li]
			switch {
			case it.kind == KindReceipt && items[li+1].kind == KindCheckpoint:
				// The next checkpoint now signs a receipt that is not there.
				wantVerifyError(t, err, KindCheckpoint, it.seq, li+1, ReasonGap)
			case it.kind == KindReceipt:
				// The next receipt sits where the deleted one should be.
				wantVerifyError(t, err, KindReceipt, it.seq, li+1, ReasonGap)
			case li == last:
				wantVerifyError(t, err, KindReceipt, 5, 7, ReasonUncovered)
			default: // an intermediate checkpoint: the final one still covers everything
				if err != nil {
					t.Fatalf("deleting checkpoint line %d: %v", li+1, err)
				}
			}
		}
	})

	t.Run("swap adjacent receipts", func(t *testing.T) {
		for li := 0; li < last-1; li++ {
			if items[li].kind != KindReceipt || items[li+1].kind != KindReceipt {
				continue
			}
			tampered := slices.Clone(lines)
			tampered[li], tampered[li+1] = tampered[li+1], tampered[li]
			_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
			wantVerifyError(t, err, KindReceipt, items[li].seq, li+1, ReasonReorder)
		}
	})

	t.Run("swap distant receipts", func(t *testing.T) {
		tampered := slices.Clone(lines)
		tampered[1], tampered[8] = tampered[8], tampered[1] // seq 1 and seq 7
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 1, 2, ReasonReorder)
	})

	t.Run("checkpoint before its receipt", func(t *testing.T) {
		tampered := slices.Clone(lines)
		tampered[4], tampered[5] = tampered[5], tampered[4] // cp4 before r4
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindCheckpoint, 4, 5, ReasonReorder)
	})

	t.Run("fork: same seq, different body", func(t *testing.T) {
		var r Receipt
		noErr(t, r.UnmarshalJSON(lines[3]))
		r.ToolID = "mcp:fs.delete_everything"
		r.Hash = must(Hash(&r))
		forged := must(r.MarshalJSON())
		tampered := slices.Insert(slices.Clone(lines), 4, forged)
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 3, 5, ReasonFork)

		// Replacing the receipt instead breaks the link to the next one.
		tampered = slices.Clone(lines)
		tampered[3] = forged
		_, err = verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 4, 5, ReasonBrokenChain)
	})

	t.Run("duplicate receipt", func(t *testing.T) {
		tampered := slices.Insert(slices.Clone(lines), 4, lines[3])
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 3, 5, ReasonDuplicate)
	})

	t.Run("remove the last checkpoint", func(t *testing.T) {
		_, err := verifyBytes(joinFile(lines[:last]), pub, VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 5, 7, ReasonUncovered)
	})

	t.Run("truncate inside the last line", func(t *testing.T) {
		for _, cut := range []int{1, 40, len(lines[last]) - 1} {
			trunc := append(joinFile(lines[:last]), lines[last][:cut]...)
			_, err := verifyBytes(trunc, pub, VerifyOptions{})
			wantVerifyError(t, err, KindLine, 0, last+1, ReasonMalformed)
		}
	})

	t.Run("no trailing newline is fine", func(t *testing.T) {
		if _, err := verifyBytes(bytes.TrimSuffix(data, []byte("\n")), pub, VerifyOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("wrong public key", func(t *testing.T) {
		_, err := verifyBytes(data, pubOf(otherKey()), VerifyOptions{})
		wantVerifyError(t, err, KindReceipt, 0, 1, ReasonBadSignature)
	})

	t.Run("checkpoint signed with another key", func(t *testing.T) {
		other := NewSigner(otherKey())
		cp := &Checkpoint{V: 1, ChainID: NewSigner(testKey()).KeyID(), Seq: 9, Hash: "", SignedAt: t0}
		var r Receipt
		noErr(t, r.UnmarshalJSON(lines[last-1]))
		cp.Hash = r.Hash
		cp.Sig = other.sign(appendCheckpointBody(nil, cp))
		tampered := slices.Clone(lines)
		tampered[last] = must(cp.MarshalJSON())
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindCheckpoint, 9, last+1, ReasonBadSignature)
	})

	t.Run("signer fork: a valid checkpoint of another history", func(t *testing.T) {
		alt := sampleCalls()
		alt[9].ToolID = "mcp:fs.write_file"
		altData, _ := buildFile(t, alt, Options{})
		altLines := splitFile(altData)
		tampered := append(slices.Clone(lines), altLines[len(altLines)-1])
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindCheckpoint, 9, last+2, ReasonFork)
	})

	t.Run("representation-only changes", func(t *testing.T) {
		for name, edit := range map[string]func([]byte) []byte{
			"space after colon": func(l []byte) []byte { return bytes.Replace(l, []byte(`"v":1`), []byte(`"v": 1`), 1) },
			"CRLF":              func(l []byte) []byte { return append(l, '\r') },
			"key case":          func(l []byte) []byte { return bytes.Replace(l, []byte(`"seq":`), []byte(`"Seq":`), 1) },
			"duplicate key":     func(l []byte) []byte { return bytes.Replace(l, []byte(`"v":1}`), []byte(`"v":1,"v":1}`), 1) },
			"escaped letter":    func(l []byte) []byte { return bytes.Replace(l, []byte(`"alice"`), []byte(`"\u0061lice"`), 1) },
			"unknown field":     func(l []byte) []byte { return bytes.Replace(l, []byte(`"v":1}`), []byte(`"v":1,"x":1}`), 1) },
			"empty optional key": func(l []byte) []byte {
				return bytes.Replace(l, []byte(`,"callId"`), []byte(`,"approvalId":"","callId"`), 1)
			},
			"null optional": func(l []byte) []byte {
				return bytes.Replace(l, []byte(`"executedArgsHash"`), []byte(`"durationMs":null,"executedArgsHash"`), 1)
			},
			"float seq": func(l []byte) []byte { return bytes.Replace(l, []byte(`"seq":2,`), []byte(`"seq":2.0,`), 1) },
		} {
			line := edit(slices.Clone(lines[2]))
			if bytes.Equal(line, lines[2]) {
				t.Fatalf("%s: edit did not apply", name)
			}
			tampered := slices.Clone(lines)
			tampered[2] = line
			_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
			if err == nil {
				t.Fatalf("%s: verification passed", name)
			}
			ve := err.(*VerifyError)
			if ve.Reason != ReasonMalformed || ve.Line != 3 || (ve.Kind != KindLine && ve.Seq != 2) {
				t.Fatalf("%s: %v", name, ve)
			}
		}
	})

	t.Run("empty line", func(t *testing.T) {
		tampered := slices.Insert(slices.Clone(lines), 2, []byte{})
		_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
		wantVerifyError(t, err, KindLine, 0, 3, ReasonMalformed)
	})

	t.Run("not an object", func(t *testing.T) {
		for _, bad := range []string{"null", "[]", "42", `"receipt"`, " {}"} {
			tampered := slices.Insert(slices.Clone(lines), 0, []byte(bad))
			_, err := verifyBytes(joinFile(tampered), pub, VerifyOptions{})
			ve := wantVerifyError(t, err, KindLine, 0, 1, ReasonMalformed)
			if !strings.Contains(ve.Detail, "not a JSON object") {
				t.Errorf("%q: %v", bad, ve)
			}
		}
	})
}

// TestEscapeCaseFlip: the only one-byte change that keeps a string's value
// is the case of a hex digit in a \u escape; canonical form rejects it.
func TestEscapeCaseFlip(t *testing.T) {
	rs := sampleCalls()[:2]
	rs[1].Principal = "bob\x1fsmith"
	data, _ := buildFile(t, rs, Options{})
	if !bytes.Contains(data, []byte(`"bob\u001fsmith"`)) {
		t.Fatalf("no escape in %s", data)
	}
	_, err := verifyBytes(bytes.Replace(data, []byte(`\u001f`), []byte(`\u001F`), 1), pubOf(testKey()), VerifyOptions{})
	ve := wantVerifyError(t, err, KindReceipt, 1, 2, ReasonMalformed)
	if !strings.Contains(ve.Detail, "canonical") {
		t.Fatalf("detail %q", ve.Detail)
	}
}

func TestVerifySuffix(t *testing.T) {
	pub := pubOf(testKey())
	data, items := buildFile(t, sampleCalls(), Options{}, 4)
	lines := splitFile(data)
	// lines[6:] is r5..r9 cp9; lines[5] is cp4, the head of the first part.
	suffix := joinFile(lines[6:])

	_, err := verifyBytes(suffix, pub, VerifyOptions{})
	ve := wantVerifyError(t, err, KindReceipt, 0, 1, ReasonGap)
	if !strings.Contains(ve.Detail, "From") {
		t.Fatalf("detail %q does not hint at From", ve.Detail)
	}

	rep, err := verifyBytes(suffix, pub, VerifyOptions{From: 5})
	if err != nil || rep.Receipts != 5 || rep.Heads[0].First != 5 || rep.Heads[0].Seq != 9 {
		t.Fatalf("From=5: %v %+v", err, rep)
	}
	if !slices.Equal(rep.Graph.Orphans, []string{"call_i"}) {
		t.Fatalf("orphans %v", rep.Graph.Orphans)
	}
	_, err = verifyBytes(suffix, pub, VerifyOptions{From: 4})
	wantVerifyError(t, err, KindReceipt, 4, 1, ReasonGap)

	// Anchored by the previous part's last checkpoint: prevHash is checked.
	anchored := joinFile(lines[5:])
	rep, err = verifyBytes(anchored, pub, VerifyOptions{})
	if err != nil || rep.Receipts != 5 || rep.Checkpoints != 2 {
		t.Fatalf("anchored: %v %+v", err, rep)
	}
	alt := sampleCalls()
	alt[4].ToolID = "mcp:fs.other"
	altData, altItems := buildFile(t, alt, Options{}, 4)
	if altItems[5] != items[5] {
		t.Fatalf("alt items %v", altItems)
	}
	bad := slices.Clone(lines[5:])
	bad[0] = splitFile(altData)[5] // a valid checkpoint at seq 4 of a different history
	_, err = verifyBytes(joinFile(bad), pub, VerifyOptions{})
	wantVerifyError(t, err, KindReceipt, 5, 2, ReasonBrokenChain)

	// A checkpoint referencing a receipt before the suffix is refused.
	mixed := append([][]byte{lines[6]}, lines[5])
	_, err = verifyBytes(joinFile(mixed), pub, VerifyOptions{From: 5})
	wantVerifyError(t, err, KindCheckpoint, 4, 2, ReasonMalformed)
}

func TestVerifyMergedChains(t *testing.T) {
	a, _ := buildFile(t, sampleCalls()[:3], Options{})
	other := NewChain(NewSigner(otherKey()), Options{Now: fixedClock()})
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range sampleCalls()[3:6] {
		noErr(t, other.AppendWith(r, w.WriteReceipt))
	}
	cp, _ := other.Checkpoint()
	noErr(t, w.WriteCheckpoint(cp))
	// Interleave the two chains line by line.
	la, lb := splitFile(a), splitFile(b.Bytes())
	var merged [][]byte
	for i := range max(len(la), len(lb)) {
		if i < len(la) {
			merged = append(merged, la[i])
		}
		if i < len(lb) {
			merged = append(merged, lb[i])
		}
	}
	data := joinFile(merged)
	rep, err := verifyBytes(data, pubOf(testKey()), VerifyOptions{Keys: []ed25519.PublicKey{pubOf(otherKey())}})
	if err != nil || rep.Receipts != 6 || len(rep.Chains) != 2 || !sort.StringsAreSorted(rep.Chains) {
		t.Fatalf("merged: %v %+v", err, rep)
	}
	_, err = verifyBytes(data, pubOf(testKey()), VerifyOptions{})
	wantVerifyError(t, err, KindReceipt, 0, 2, ReasonBadSignature)
}

func TestVerifyArguments(t *testing.T) {
	if _, err := Verify(strings.NewReader(""), nil, VerifyOptions{}); err == nil || errorsAsVerify(err) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := Verify(strings.NewReader(""), []byte{1, 2}, VerifyOptions{}); err == nil {
		t.Fatal("short key accepted")
	}
	rep, err := Verify(strings.NewReader(""), pubOf(testKey()), VerifyOptions{})
	if err != nil || rep.Receipts != 0 || len(rep.Chains) != 0 || rep.Graph == nil {
		t.Fatalf("empty stream: %v %+v", err, rep)
	}
	long := bytes.Repeat([]byte("x"), 2000)
	_, err = Verify(bytes.NewReader(long), pubOf(testKey()), VerifyOptions{MaxLineBytes: 1000})
	wantVerifyError(t, err, KindLine, 0, 1, ReasonMalformed)
}

func errorsAsVerify(err error) bool { _, ok := err.(*VerifyError); return ok }

func TestVerifyReadError(t *testing.T) {
	data, _ := buildFile(t, sampleCalls()[:2], Options{})
	r := &errAfter{data: data}
	_, err := Verify(r, pubOf(testKey()), VerifyOptions{})
	if err == nil || errorsAsVerify(err) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("read error: %v", err)
	}
}

type errAfter struct{ data []byte }

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, fmt.Errorf("connection reset")
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}
