package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/store"
)

// pruneRecordings runs audit.record_retention: it deletes the recorded
// calls that started more than keep ago, at once and then every every,
// until the returned stop is called (stop waits for the loop to end).
func pruneRecordings(ctx context.Context, rs store.Recordings, keep, every time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			n, err := rs.PruneRecordings(ctx, time.Now().Add(-keep))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Error("store: record retention prune failed; retrying at the next interval", "err", err)
			case n > 0:
				log.Info("store: record retention pruned", "recordedCalls", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
