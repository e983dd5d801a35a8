package receipt

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var updateSeeds = flag.Bool("update", false, "rewrite the committed FuzzVerify seed corpus in testdata/fuzz/FuzzVerify")

// FuzzVerify: arbitrary bytes never make Verify panic; a failure is a
// well-formed *VerifyError, and a success accounts for every line. The
// committed seeds (testdata/fuzz/FuzzVerify) include valid files, so the
// fuzzer mutates real receipts and checkpoints.
func FuzzVerify(f *testing.F) {
	pub := pubOf(testKey())
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opts := range []VerifyOptions{{}, {From: 3}} {
			rep, err := Verify(bytes.NewReader(data), pub, opts)
			if rep == nil {
				t.Fatal("nil report")
			}
			if err != nil {
				var ve *VerifyError
				if !errors.As(err, &ve) {
					t.Fatalf("error %v is not a *VerifyError", err)
				}
				if ve.Line < 1 || !stableReason(ve.Reason) || ve.Error() == "" || rep.Graph != nil {
					t.Fatalf("bad failure %#v", ve)
				}
				continue
			}
			lines := bytes.Count(data, []byte("\n"))
			if len(data) > 0 && data[len(data)-1] != '\n' {
				lines++
			}
			if rep.Receipts+rep.Checkpoints != lines || rep.Graph == nil || len(rep.Graph.Nodes)+len(rep.Graph.Duplicates) > rep.Receipts {
				t.Fatalf("report %+v for %d lines", rep, lines)
			}
		}
	})
}

// fuzzSeeds returns the seed corpus: valid files and near misses.
func fuzzSeeds(t testing.TB) map[string][]byte {
	valid, _ := buildFile(t, sampleCalls()[:4], Options{}, 1)
	signEach, _ := buildFile(t, sampleCalls()[4:6], Options{SignEach: true})
	full, _ := buildFile(t, sampleCalls(), Options{}, 2)
	fl := splitFile(full)
	anchored := joinFile(fl[3:7]) // cp2, r3, r4, r5: a suffix anchored by a checkpoint; r5 uncovered
	vl := splitFile(valid)
	fork := joinFile(append(vl[:2:2], bytes.Replace(vl[1], []byte(`"mcp:fs.read_file"`), []byte(`"mcp:fs.write_file"`), 1)))
	return map[string][]byte{
		"valid":           valid,
		"valid_sign_each": signEach,
		"anchored_suffix": anchored,
		"truncated":       valid[:len(valid)-50],
		"fork":            fork,
		"not_canonical":   bytes.Replace(valid, []byte(`":`), []byte(`": `), 3),
		"empty":           {},
		"odd_values":      []byte("{\"checkpoint\":null}\n{\"seq\":1e400,\"v\":-1}\n{\"seq\":18446744073709551616}\n\n{}\r\n[1,2]\n\"x\"\n"),
	}
}

func seedFile(data []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
}

// TestFuzzSeedCorpus keeps the committed seeds current: they must match what
// fuzzSeeds builds (run `go test ./receipt -run TestFuzzSeedCorpus -update`
// after a deliberate format change), and the valid ones must verify.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzVerify")
	seeds := fuzzSeeds(t)
	if *updateSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range seeds {
			if err := os.WriteFile(filepath.Join(dir, name), seedFile(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range seeds {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("seed %s: %v (run with -update)", name, err)
		}
		if !bytes.Equal(got, seedFile(data)) {
			t.Errorf("seed %s is stale (run with -update)", name)
		}
		_, err = verifyBytes(data, pubOf(testKey()), VerifyOptions{})
		if wantOK := strings.HasPrefix(name, "valid") || name == "empty"; (err == nil) != wantOK {
			t.Errorf("seed %s: verify err = %v", name, err)
		}
	}
	_, err := verifyBytes(seeds["anchored_suffix"], pubOf(testKey()), VerifyOptions{})
	wantVerifyError(t, err, KindReceipt, 3, 2, ReasonUncovered)
}
