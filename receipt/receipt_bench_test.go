package receipt

import (
	"bytes"
	"testing"
)

// BenchmarkAppend is the per-call cost on the hot path: validate, encode the
// canonical body, SHA-256, link (no signature).
func BenchmarkAppend(b *testing.B) {
	c := NewChain(NewSigner(testKey()), Options{})
	r := sampleCalls()[6] // the largest shape: result hash, mutation source
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel measures Append under contention on the chain lock.
func BenchmarkAppendParallel(b *testing.B) {
	c := NewChain(NewSigner(testKey()), Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := sampleCalls()[6]
		for pb.Next() {
			if err := c.Append(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAppendSignEach is Append with Options.SignEach (one Ed25519
// signature per receipt).
func BenchmarkAppendSignEach(b *testing.B) {
	c := NewChain(NewSigner(testKey()), Options{SignEach: true})
	r := sampleCalls()[6]
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpoint signs one checkpoint per iteration (it appends one
// receipt first so the head moves; that adds the Append cost, ~1/20 of it).
func BenchmarkCheckpoint(b *testing.B) {
	c := NewChain(NewSigner(testKey()), Options{})
	r := sampleCalls()[6]
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Append(r); err != nil {
			b.Fatal(err)
		}
		if _, ok := c.Checkpoint(); !ok {
			b.Fatal("no checkpoint")
		}
	}
}

// BenchmarkHash is the canonical body hash alone.
func BenchmarkHash(b *testing.B) {
	r := sampleCalls()[6]
	buildFile(b, []*Receipt{r}, Options{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Hash(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify verifies a 1000-receipt file with a checkpoint every 100
// receipts; ns/receipt is the per-receipt cost.
func BenchmarkVerify(b *testing.B) {
	const n = 1000
	rs := make([]*Receipt, 0, n)
	var cps []int
	for i := range n {
		rs = append(rs, sampleCalls()[i%10])
		rs[i].CallID = rs[i].CallID + "_" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		rs[i].ParentCallID = ""
		if i%100 == 99 {
			cps = append(cps, i)
		}
	}
	data, _ := buildFile(b, rs, Options{}, cps...)
	pub := pubOf(testKey())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(bytes.NewReader(data), pub, VerifyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/receipt")
}
