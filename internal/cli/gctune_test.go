package cli

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {1 << 20, 400}, {16 << 20, 400}, {32 << 20, 200}, {64 << 20, 100}, {80 << 20, 100}, {1 << 40, 100},
	} {
		if got := gcPercent(tc.live); got != tc.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// The tuner follows the live heap a collection leaves: it lowers the
// percentage when the live heap grows, raises it again when it shrinks,
// and leaves it alone once stopped.
func TestGCTunerFollowsLiveHeap(t *testing.T) {
	var live atomic.Uint64
	live.Store(8 << 20)
	sets := make(chan int, 16)
	tuner := startGCTuner(func(p int) int { sets <- p; return 0 }, live.Load)
	if p := <-sets; p != 400 {
		t.Fatalf("initial percentage %d, want 400", p)
	}
	// want waits for the percentage p, collecting until the tuner (which
	// runs after a collection, on another goroutine) sets it.
	want := func(p int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			runtime.GC()
			select {
			case got := <-sets:
				if got != p {
					t.Fatalf("percentage %d, want %d", got, p)
				}
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.Fatalf("the tuner never set %d", p)
	}
	live.Store(128 << 20)
	want(100)
	live.Store(4 << 20)
	want(400)
	tuner.stop()
	live.Store(128 << 20)
	for range 3 {
		runtime.GC()
	}
	select {
	case p := <-sets:
		t.Errorf("a stopped tuner set %d", p)
	default:
	}
}
