package store

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// Followed is one event delivered by Events.Follow: the event (with its
// Tenant and Sequence) and the cursor that resumes right after it.
type Followed struct {
	Event  audit.Event // the stored event, Tenant and Sequence set; the receiver owns it
	Cursor string      // resumes right after this event (Follow, EventsByTime)
}

// Record is a stored event with its position in the store's commit order
// (Cursor.Pos). For backend implementers.
type Record struct {
	Pos   int64       // position in commit order (Cursor.Pos), ≥ 1
	Event audit.Event // the stored event, Tenant and Sequence set
}

// Cursor returns the cursor of r's position.
func (r *Record) Cursor() string { return Cursor{Time: r.Event.Timestamp, Pos: r.Pos}.String() }

// ReadAfter reads a backend's stored events of tenant with afterPos < Pos ≤
// uptoPos, in Pos order, at most limit of them. Feed calls it from follower
// goroutines, concurrently, to catch followers up. Errors end the follower
// (its channel is closed).
type ReadAfter func(ctx context.Context, tenant string, afterPos, uptoPos int64, limit int) ([]Record, error)

// FeedOptions configures a Feed. The zero value is valid.
type FeedOptions struct {
	// Buffer is each follower's live buffer, in events (default 256): how
	// far a follower may fall behind the writers before it is detached and
	// left to catch up from the store.
	Buffer int
	// Page is the catch-up read size, in events (default 256).
	Page int
	// Logger receives catch-up read failures; nil discards.
	Logger *slog.Logger
	// Committed, if set, returns the position of the last committed event
	// (0 if none), reading the backend. Follow calls it only for a cursor
	// ahead of the last published event, to tell a cursor of an event that
	// is committed but not yet published (a backend whose commits become
	// readable, say through EventsByTime, before it calls Publish) or whose
	// position the feed was not told about (NewFeed's last lower than a
	// pruned event's) from one ahead of the log. Nil means the last
	// published position is the last committed one: the backend publishes
	// every commit before any reader can see it. Errors should be
	// *errcode.Error; Follow returns them as they are.
	Committed func(ctx context.Context) (int64, error)
	// Poll, when positive, makes every follower read the backend's commit
	// order (Committed, then ReadAfter) at least once per Poll instead of
	// waiting for Publish: for a backend whose log other processes also
	// write (an SQLite file a gateway writes while a CLI follows it), whose
	// commits this Feed is never told about. A Publish still wakes the
	// followers at once. Requires Committed (NewFeed ignores Poll without
	// it). 0 delivers only what Publish hands on.
	Poll time.Duration
}

// Feed is the follow-mode fan-out a backend embeds to implement
// Events.Follow: the backend calls Publish with every committed event, in
// commit order, and Follow serves followers from its live buffers and, when
// they fall behind, from the backend's ReadAfter.
//
// Publish never blocks: it offers each event to the followers of its tenant
// without waiting; a follower whose buffer is full is detached (its live
// buffer closed) and, after draining that buffer, re-reads the store from
// its last delivered event and re-attaches. Each follower has one goroutine
// that owns its channel. All methods are safe for concurrent use, except
// that Publish calls must come from one goroutine at a time, in commit
// order.
type Feed struct {
	read      ReadAfter
	committed func(ctx context.Context) (int64, error) // FeedOptions.Committed, may be nil
	buffer    int
	page      int
	log       *slog.Logger

	done chan struct{}
	wg   sync.WaitGroup

	poll time.Duration // FeedOptions.Poll; 0 unless committed is set

	mu     sync.Mutex
	last   int64                             // Pos of the last published event
	wake   chan struct{}                     // closed (and replaced) by Publish, for polling followers
	subs   map[string]map[*follower]struct{} // attached followers by tenant
	closed bool
}

// follower is one Follow call's state, owned by its goroutine except for
// live, which Publish fills and may close (under Feed.mu).
type follower struct {
	tenant string
	live   chan Record
}

// NewFeed returns a Feed reading missed events with read, whose last
// committed event has position last (0 for an empty store).
func NewFeed(read ReadAfter, last int64, opts FeedOptions) *Feed {
	if opts.Buffer <= 0 {
		opts.Buffer = 256
	}
	if opts.Page <= 0 {
		opts.Page = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Committed == nil || opts.Poll < 0 {
		opts.Poll = 0
	}
	return &Feed{
		read: read, committed: opts.Committed, buffer: opts.Buffer, page: opts.Page, log: opts.Logger, poll: opts.Poll,
		done: make(chan struct{}), last: last, subs: make(map[string]map[*follower]struct{}), wake: make(chan struct{}),
	}
}

// Publish hands committed events to the followers of their tenants.
// recs must be committed (readable through ReadAfter) and in increasing Pos
// order, after every previously published one. It never blocks on a
// follower. It copies what it hands on (the payload, once per event that
// has followers), so recs may be reused or modified once it returns.
func (f *Feed) Publish(recs []Record) {
	if len(recs) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.poll > 0 {
		close(f.wake)
		f.wake = make(chan struct{})
	}
	for _, r := range recs {
		if r.Pos > f.last {
			f.last = r.Pos
		}
		subs := f.subs[r.Event.Tenant]
		if len(subs) == 0 {
			continue
		}
		r.Event.Payload = bytes.Clone(r.Event.Payload)
		for fl := range subs {
			select {
			case fl.live <- r:
			default:
				// Too slow: detach it. It drains what it has, then catches
				// up from the store (r is committed, so it will read it).
				delete(subs, fl)
				close(fl.live)
			}
		}
	}
}

// Last returns the position of the last published event (0 if none).
func (f *Feed) Last() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Follow implements Events.Follow over the feed: cursor "" follows from
// the last published event, FromStart from the start, any other cursor
// from its position. A cursor whose position is greater than that of the
// last committed event when Follow is called (the last published one, or
// FeedOptions.Committed's answer) is refused: no event of the log has it,
// and following it would silently skip every event stored until the log
// reached it. Errors: *errcode.Error InvalidArgument for a malformed
// cursor or one ahead of the log (see ErrCursorAhead); AuditUnavailable if
// the feed is closed; Cancelled or Timeout if ctx is done; whatever
// FeedOptions.Committed returns.
func (f *Feed) Follow(ctx context.Context, tenant, cursor string) (<-chan Followed, error) {
	if err := ContextError(ctx, "follow events"); err != nil {
		return nil, err
	}
	var after int64
	switch {
	case cursor == "" && f.poll > 0:
		last, err := f.committed(ctx)
		if err != nil {
			return nil, err
		}
		after = max(last, f.Last())
	case cursor == "":
		after = f.Last()
	default:
		c, err := ParseCursor(cursor)
		if err != nil {
			return nil, err
		}
		after = c.Pos
		if err := f.checkBehind(ctx, after); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrClosed("follow events")
	}
	f.wg.Add(1)
	f.mu.Unlock()
	out := make(chan Followed)
	if f.poll > 0 {
		go f.runPolling(ctx, tenant, after, out)
	} else {
		go f.run(ctx, &follower{tenant: tenant}, after, out)
	}
	return out, nil
}

// runPolling is a follower's goroutine when FeedOptions.Poll is set: it
// reads the backend's commit order after its last delivered position up to
// the last committed one, then waits for a Publish or Poll, until ctx is
// done or the feed closes. Reading positions in commit order from the
// store, never from live buffers, is what makes it see every process's
// commits exactly once: a backend's positions become readable in
// increasing order (FeedOptions.Committed).
func (f *Feed) runPolling(ctx context.Context, tenant string, after int64, out chan<- Followed) {
	defer f.wg.Done()
	defer close(out)
	t := time.NewTimer(f.poll)
	defer t.Stop()
	for {
		f.mu.Lock()
		wake, closed := f.wake, f.closed
		f.mu.Unlock()
		if closed {
			return
		}
		upto, err := f.committed(ctx)
		if err == nil {
			upto = max(upto, f.Last())
		}
		for err == nil && after < upto {
			var recs []Record
			if recs, err = f.read(ctx, tenant, after, upto, f.page); err != nil {
				break
			}
			for i := range recs {
				if recs[i].Pos <= after || recs[i].Pos > upto {
					continue
				}
				if !f.send(ctx, out, &recs[i]) {
					return
				}
				after = recs[i].Pos
			}
			if len(recs) < f.page {
				after = upto // no more of this tenant's events up to upto
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("store: follow: polling read failed", "tenant", tenant, "after", after, "err", err)
			}
			return
		}
		t.Reset(f.poll)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			return
		case <-f.done:
			return
		}
	}
}

// checkBehind fails with ErrCursorAhead unless pos is at most the position
// of the last committed event. The last published position is a lower
// bound of it, so Committed is read only when pos is beyond that.
func (f *Feed) checkBehind(ctx context.Context, pos int64) error {
	if pos <= f.Last() {
		return nil
	}
	if f.committed != nil {
		last, err := f.committed(ctx)
		if err != nil {
			return err
		}
		if pos <= last {
			return nil
		}
	}
	return ErrCursorAhead()
}

// run is a follower's goroutine: catch up from the store, then deliver live
// events, and again after every detachment, until ctx is done or the feed
// closes.
func (f *Feed) run(ctx context.Context, fl *follower, after int64, out chan<- Followed) {
	defer f.wg.Done()
	defer close(out)
	for {
		upto, ok := f.attach(fl)
		if !ok {
			return
		}
		live := fl.live
		for after < upto {
			recs, err := f.read(ctx, fl.tenant, after, upto, f.page)
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("store: follow: catch-up read failed", "tenant", fl.tenant, "after", after, "err", err)
				}
				f.detach(fl)
				return
			}
			for i := range recs {
				if recs[i].Pos <= after || recs[i].Pos > upto {
					continue
				}
				if !f.send(ctx, out, &recs[i]) {
					f.detach(fl)
					return
				}
				after = recs[i].Pos
			}
			if len(recs) < f.page {
				after = upto // no more of this tenant's events up to upto
			}
		}
		if !f.deliverLive(ctx, fl, live, &after, out) {
			return
		}
	}
}

// deliverLive forwards live events until the follower is detached (it then
// returns true to catch up again) or must stop (false).
func (f *Feed) deliverLive(ctx context.Context, fl *follower, live chan Record, after *int64, out chan<- Followed) bool {
	for {
		select {
		case r, ok := <-live:
			if !ok {
				return true
			}
			if r.Pos <= *after {
				continue
			}
			if !f.send(ctx, out, &r) {
				f.detach(fl)
				return false
			}
			*after = r.Pos
		case <-ctx.Done():
			f.detach(fl)
			return false
		case <-f.done:
			return false
		}
	}
}

// attach registers fl for live delivery with a fresh buffer and returns
// the last published position: fl receives every event published after it.
// ok is false if the feed is closed.
func (f *Feed) attach(fl *follower) (upto int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, false
	}
	fl.live = make(chan Record, f.buffer)
	subs := f.subs[fl.tenant]
	if subs == nil {
		subs = make(map[*follower]struct{})
		f.subs[fl.tenant] = subs
	}
	subs[fl] = struct{}{}
	return f.last, true
}

// detach unregisters fl if it is attached.
func (f *Feed) detach(fl *follower) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if subs := f.subs[fl.tenant]; subs != nil {
		if _, ok := subs[fl]; ok {
			delete(subs, fl)
			close(fl.live)
		}
		if len(subs) == 0 {
			delete(f.subs, fl.tenant)
		}
	}
}

// send delivers r (with its own copy of the payload) unless ctx is done or
// the feed closes first.
func (f *Feed) send(ctx context.Context, out chan<- Followed, r *Record) bool {
	ev := r.Event
	ev.Payload = bytes.Clone(ev.Payload)
	select {
	case out <- Followed{Event: ev, Cursor: r.Cursor()}:
		return true
	case <-ctx.Done():
		return false
	case <-f.done:
		return false
	}
}

// Close detaches every follower and closes their channels, and waits for
// their goroutines to end (a follower inside a ReadAfter call ends when
// that call returns). Later Follow calls fail with AuditUnavailable; later
// Publish calls only record the position. Idempotent.
func (f *Feed) Close() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.done)
		for _, subs := range f.subs {
			for fl := range subs {
				close(fl.live)
			}
		}
		f.subs = map[string]map[*follower]struct{}{}
	}
	f.mu.Unlock()
	f.wg.Wait()
}
