package receipt

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentAppendAndCheckpoint: many goroutines append (committing to
// one Writer in seq order) while others take and write checkpoints; the
// resulting file verifies. Run with -race.
func TestConcurrentAppendAndCheckpoint(t *testing.T) {
	for _, signEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("signEach=%v", signEach), func(t *testing.T) {
			const writers, perWriter = 8, 150
			c := NewChain(NewSigner(testKey()), Options{SignEach: signEach})
			var buf bytes.Buffer
			w := NewWriter(&buf)
			var done atomic.Bool
			var checkpoints atomic.Int64
			var wg, cpg sync.WaitGroup
			for range 2 {
				cpg.Go(func() {
					for !done.Load() {
						if cp, ok := c.Checkpoint(); ok {
							if err := w.WriteCheckpoint(cp); err != nil {
								t.Error(err)
								return
							}
							checkpoints.Add(1)
						}
						runtime.Gosched()
					}
				})
			}
			for g := range writers {
				wg.Go(func() {
					for i := range perWriter {
						r := call(fmt.Sprintf("call_%d_%d", g, i), StatusOK)
						if i > 0 {
							r.ParentCallID = fmt.Sprintf("call_%d_%d", g, i-1)
						}
						if err := c.AppendWith(r, w.WriteReceipt); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			done.Store(true)
			cpg.Wait()
			if cp, ok := c.Checkpoint(); ok {
				if err := w.WriteCheckpoint(cp); err != nil {
					t.Fatal(err)
				}
				checkpoints.Add(1)
			}

			rep, err := verifyBytes(buf.Bytes(), pubOf(testKey()), VerifyOptions{})
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if rep.Receipts != writers*perWriter || rep.Checkpoints != int(checkpoints.Load()) || rep.Heads[0].Seq != writers*perWriter-1 {
				t.Fatalf("report %+v (checkpoints written %d)", rep, checkpoints.Load())
			}
			if len(rep.Graph.Roots) != writers || len(rep.Graph.Orphans) != 0 {
				t.Fatalf("graph roots %d orphans %d", len(rep.Graph.Roots), len(rep.Graph.Orphans))
			}
			if seq, h, _ := c.Head(); seq != writers*perWriter-1 || h != rep.Heads[0].Hash {
				t.Fatalf("chain head %d %s, file head %+v", seq, h, rep.Heads[0])
			}
		})
	}
}

// TestConcurrentAppendThenStore: plain Append from many goroutines yields
// seqs 0…n−1 exactly once, each linked to its predecessor.
func TestConcurrentAppendThenStore(t *testing.T) {
	c := NewChain(NewSigner(testKey()), Options{})
	const n = 1000
	rs := make([]*Receipt, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rs[i] = call(fmt.Sprintf("c%d", i), StatusOK)
			if err := c.Append(rs[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(rs, func(a, b *Receipt) int { return int(a.Seq) - int(b.Seq) })
	for i, r := range rs {
		if r.Seq != uint64(i) || (i > 0 && r.PrevHash != rs[i-1].Hash) {
			t.Fatalf("seq %d at %d, prev ok=%v", r.Seq, i, i == 0 || r.PrevHash == rs[i-1].Hash)
		}
	}
}

func TestBuildGraph(t *testing.T) {
	node := func(id, parent string) *Receipt { return &Receipt{CallID: id, ParentCallID: parent} }
	g := BuildGraph([]*Receipt{
		node("a", ""), node("b", "a"), node("c", "a"), node("d", "b"),
		node("x", "y"), node("y", "x"), // a two-cycle
		node("s", "s"),                    // a self-loop
		node("o", "gone"), node("p", "o"), // an orphan with a child
		node("a", "zzz"), // duplicate callId: first kept
		nil, node("", "a"),
	})
	if !slices.Equal(g.Roots, []string{"a"}) || !slices.Equal(g.Children("a"), []string{"b", "c"}) || !slices.Equal(g.Children("b"), []string{"d"}) {
		t.Fatalf("roots %v children a=%v b=%v", g.Roots, g.Children("a"), g.Children("b"))
	}
	if !slices.Equal(g.Orphans, []string{"o"}) || !slices.Equal(g.Children("o"), []string{"p"}) {
		t.Fatalf("orphans %v", g.Orphans)
	}
	if len(g.Cycles) != 2 || !slices.Equal(g.Cycles[0], []string{"x", "y"}) || !slices.Equal(g.Cycles[1], []string{"s"}) {
		t.Fatalf("cycles %v", g.Cycles)
	}
	if !slices.Equal(g.Duplicates, []string{"a"}) || g.Nodes["a"].ParentCallID != "" || len(g.Nodes) != 9 {
		t.Fatalf("duplicates %v, nodes %d", g.Duplicates, len(g.Nodes))
	}
	if g.Children("nope") != nil {
		t.Fatal("children of an unknown call")
	}
	empty := BuildGraph(nil)
	if empty.Nodes == nil || empty.Roots == nil || len(empty.Roots) != 0 {
		t.Fatalf("empty graph %+v", empty)
	}
}
