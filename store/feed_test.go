package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// noRead is a ReadAfter of an empty log.
func noRead(context.Context, string, int64, int64, int) ([]store.Record, error) { return nil, nil }

// TestFeedCursorAhead: Follow refuses a well-formed cursor beyond the last
// committed position, which is the last published one, or Committed's
// answer when the backend gives one (consulted only beyond the published
// position).
func TestFeedCursorAhead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cur := func(pos int64) string { return store.Cursor{Time: at, Pos: pos}.String() }
	wantAhead := func(t *testing.T, err error, what string) {
		t.Helper()
		e := errcode.As(err)
		if e == nil || e.Code != errcode.InvalidArgument || e.Message != "cursor is ahead of the log" || e.Details["field"] != "cursor" {
			t.Fatalf("%s: got %v, want invalid_argument: cursor is ahead of the log (field cursor)", what, err)
		}
	}

	t.Run("published", func(t *testing.T) {
		f := store.NewFeed(noRead, 5, store.FeedOptions{})
		defer f.Close()
		for _, c := range []string{"", store.FromStart, cur(1), cur(5)} {
			if _, err := f.Follow(ctx, "acme", c); err != nil {
				t.Fatalf("Follow(%q): %v", c, err)
			}
		}
		_, err := f.Follow(ctx, "acme", cur(6))
		wantAhead(t, err, "Follow one past the last published event")
		f.Publish([]store.Record{{Pos: 6}})
		if _, err := f.Follow(ctx, "acme", cur(6)); err != nil {
			t.Fatalf("Follow(6) once 6 is published: %v", err)
		}
	})

	t.Run("committed", func(t *testing.T) {
		var calls atomic.Int32
		last, fail := int64(10), error(nil)
		f := store.NewFeed(noRead, 5, store.FeedOptions{Committed: func(context.Context) (int64, error) {
			calls.Add(1)
			return last, fail
		}})
		defer f.Close()
		for _, c := range []string{"", store.FromStart, cur(5)} {
			if _, err := f.Follow(ctx, "acme", c); err != nil {
				t.Fatalf("Follow(%q): %v", c, err)
			}
		}
		if n := calls.Load(); n != 0 {
			t.Fatalf("Committed called %d times for cursors within the published log", n)
		}
		// Committed but not yet published: accepted.
		if _, err := f.Follow(ctx, "acme", cur(10)); err != nil {
			t.Fatalf("Follow(10) with 10 committed: %v", err)
		}
		_, err := f.Follow(ctx, "acme", cur(11))
		wantAhead(t, err, "Follow one past the last committed event")
		fail = errcode.New(errcode.AuditUnavailable, "disk on fire")
		_, err = f.Follow(ctx, "acme", cur(8))
		if !errors.Is(err, fail) {
			t.Fatalf("Follow with a failing Committed: got %v, want %v", err, fail)
		}
	})
}
