package cli

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The gateway's garbage collection target (issue 15 point 5). Its garbage is
// per-call JSON and its live heap is small while it serves calls (tens of
// MB), so collecting less often than Go's default (GOGC 100) cuts GC CPU,
// about 15 % of a call. But the heap goal is live × (1 + GOGC/100), and the
// memory above the live heap is held until the next collection: with a
// thousand idle MCP sessions (70–80 MB live) a fixed GOGC 400 holds a 400 MB
// heap goal that an idle gateway never collects down. So the percentage
// follows the live heap: 400 while the live heap is at most gcHeadroom/4,
// then whatever keeps the heap goal gcHeadroom above the live heap, and never
// below Go's default of 100.
const (
	gcMaxPercent = 400
	gcMinPercent = 100
	gcHeadroom   = 64 << 20 // bytes the heap goal may exceed the live heap by, while GOGC > 100
)

// gcPercent is the GC percentage for a live heap of live bytes: gcMaxPercent
// up to gcHeadroom/4, then 100·gcHeadroom/live, at least gcMinPercent.
func gcPercent(live uint64) int {
	if live == 0 {
		return gcMaxPercent
	}
	p := uint64(100) * gcHeadroom / live
	return int(min(max(p, gcMinPercent), gcMaxPercent))
}

// gcTuner re-sets the GC percentage after each collection from the live heap
// it left (runtime/metrics /gc/heap/live:bytes), when it differs from the
// current one by more than a tenth. Safe for concurrent use; stop it with
// stop.
type gcTuner struct {
	set     func(percent int) int // debug.SetGCPercent, or a test's
	live    func() uint64
	mu      sync.Mutex
	current int
	stopped bool
}

// startGCTuner sets the percentage for the current live heap and keeps it
// following the live heap until stop is called.
func startGCTuner(set func(int) int, live func() uint64) (t *gcTuner) {
	t = &gcTuner{set: set, live: live}
	t.current = gcPercent(live())
	set(t.current)
	t.arm()
	return t
}

// arm registers a cleanup on a fresh object: it runs after the next
// collection that finds the object unreachable (every collection, since
// nothing keeps it), re-tunes and re-arms.
func (t *gcTuner) arm() {
	sentinel := new([16]byte)
	runtime.AddCleanup(sentinel, func(*gcTuner) { t.tune() }, t)
}

func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	p := gcPercent(t.live())
	if d := p - t.current; d*10 > t.current || -d*10 > t.current {
		t.current = p
		t.set(p)
	}
	t.arm()
}

// stop ends the tuning (the percentage stays as last set).
func (t *gcTuner) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// liveHeap is the live heap the last collection left, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// tuneGC is serve's GC setting: GOGC from the environment when set (then
// nothing is tuned), else startGCTuner with debug.SetGCPercent. The func it
// returns stops the tuner.
func tuneGC(getenv func(string) string) func() {
	if getenv("GOGC") != "" {
		return func() {}
	}
	t := startGCTuner(debug.SetGCPercent, liveHeap)
	return t.stop
}
