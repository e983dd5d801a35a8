package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// request is one caller's write: events, a receipt, or both (an outcome).
type request struct {
	ctx    context.Context
	op     string
	events []*audit.Event
	rcpt   *receipt.Receipt // nil for events only
	done   chan error

	// set while a batch is applied
	seqs []int64
	recs []store.Record
}

// writer is the group-commit goroutine of a Store.
type writer struct {
	s        *Store
	chain    *receipt.Chain // owned by the writer goroutine
	q        chan *request
	done     chan struct{}
	maxBatch int
	commits  atomic.Int64 // transactions committed (for tests of group commit)
	stale    bool         // chain may be ahead of the stored receipts (restoreChain failed)
}

func newWriter(s *Store, chain *receipt.Chain, opts Options) *writer {
	qs, mb := opts.QueueSize, opts.MaxBatch
	if qs <= 0 {
		qs = DefaultQueueSize
	}
	if mb <= 0 {
		mb = DefaultMaxBatch
	}
	return &writer{s: s, chain: chain, q: make(chan *request, qs), done: make(chan struct{}), maxBatch: mb}
}

// submit queues req and waits for its outcome.
func (s *Store) submit(req *request) error {
	if err := store.ContextError(req.ctx, req.op); err != nil {
		return err
	}
	req.done = make(chan error, 1)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed(req.op)
	}
	select {
	case s.w.q <- req:
	case <-req.ctx.Done():
		s.mu.RUnlock()
		return store.ContextError(req.ctx, req.op)
	}
	s.mu.RUnlock()
	return <-req.done
}

// run takes requests until the queue is closed and drained.
func (w *writer) run() {
	defer close(w.done)
	for req := range w.q {
		batch := []*request{req}
		items := len(req.events) + btoi(req.rcpt != nil)
	fill:
		for items < w.maxBatch {
			select {
			case r, ok := <-w.q:
				if !ok {
					break fill
				}
				batch = append(batch, r)
				items += len(r.events) + btoi(r.rcpt != nil)
			default:
				break fill
			}
		}
		w.commit(batch)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxAttempts bounds the retries of a batch aborted by a deadlock or a
// serialization failure.
const maxAttempts = 5

// commit applies batch in one transaction and answers every request.
func (w *writer) commit(batch []*request) {
	errs := make([]error, len(batch))
	live := make([]bool, len(batch))
	for i, req := range batch {
		if err := store.ContextError(req.ctx, req.op); err != nil {
			errs[i] = err
			continue
		}
		live[i] = true
	}
	// A Store that lost its chain lock writes nothing (chainGuard): another
	// Store with its key may be writing its chain. Once the lock is held
	// again, the chain resumes from the stored head.
	err := w.s.guard.lostErr()
	if err == nil && w.s.guard != nil && w.s.guard.resume.CompareAndSwap(true, false) {
		w.stale = true
	}
	if err == nil && w.stale {
		err = w.restoreChain()
	}
	if err == nil {
		// One statement per table for the whole batch; if the database
		// refuses any of it, again with a savepoint per request.
		if err = w.fastAttempt(batch, live, errs); err != nil && !errors.Is(err, errFallback) {
			for i, req := range batch {
				if live[i] && req.rcpt != nil {
					clearChainFields(req.rcpt)
				}
			}
			if rerr := w.restoreChain(); rerr != nil {
				err = rerr
			}
		}
	}
	if err != nil && w.s.guard != nil && isFenceFailure(err) {
		err = w.s.guard.fenced()
	}
	if err != nil && !w.stale && w.s.guard.lostErr() == nil {
		for attempt := 1; ; attempt++ {
			err = w.attempt(batch, live, errs)
			if err == nil {
				break
			}
			if w.s.guard != nil && isFenceFailure(err) {
				err = w.s.guard.fenced()
				break
			}
			if rerr := w.restoreChain(); rerr != nil || !retriable(err) || attempt == maxAttempts {
				break
			}
		}
	}
	if err != nil {
		w.s.log.Warn("store/postgres: batch failed", "requests", len(batch), "err", err)
		fail := store.Unavailable("store batch", err)
		for i, req := range batch {
			if live[i] {
				errs[i] = fail
				if req.rcpt != nil {
					clearChainFields(req.rcpt)
				}
			}
		}
	} else {
		added := false
		for i, req := range batch {
			if !live[i] || errs[i] != nil {
				continue
			}
			for j, ev := range req.events {
				ev.Sequence = req.seqs[j]
			}
			added = added || len(req.recs) > 0
		}
		if added {
			w.s.newEvents.wake() // this Store's followers need not wait for the NOTIFY
		}
	}
	for i, req := range batch {
		req.seqs, req.recs = nil, nil
		req.done <- errs[i]
	}
}

// clearChainFields undoes AppendWith's linking of r.
func clearChainFields(r *receipt.Receipt) {
	r.ChainID, r.Seq, r.PrevHash, r.Hash, r.Sig = "", 0, "", "", ""
}

// retriable reports whether err aborted a transaction that may succeed
// when run again: a deadlock, a serialization failure, or a unique
// violation on an event id another transaction inserted meanwhile.
func retriable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "40P01" || pe.Code == "40001" || (pe.Code == "23505" && pe.ConstraintName == "events_event_id_key")
}

// restoreChain resumes the chain from the last committed receipt after a
// failed transaction. If even that read fails, the chain is stale (it may
// be ahead of the stored receipts) and every batch fails with
// AuditUnavailable, restoring it first, until the read works: a receipt
// is never linked after one that was not stored.
func (w *writer) restoreChain() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	if w.chain == nil {
		return nil
	}
	c, err := w.s.resumeChain(ctx)
	if err != nil {
		w.s.log.Warn("store/postgres: cannot resume the receipt chain", "err", err)
		w.stale = true
		return err
	}
	w.chain, w.stale = c, false
	return nil
}

// attempt runs batch in one transaction. Per-request refusals land in
// errs (the request's savepoint is rolled back); a returned error means
// the transaction was rolled back.
func (w *writer) attempt(batch []*request, live []bool, errs []error) (err error) {
	ctx := context.Background()
	for i := range batch {
		if live[i] {
			errs[i] = nil
		}
	}
	tx, err := w.s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	if g := w.s.guard; g != nil {
		if _, err := tx.Exec(ctx, fenceStmt, g.pid.Load()); err != nil {
			return err
		}
	}
	linked, added := false, false
	for i, req := range batch {
		if !live[i] {
			continue
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		rerr, serr := w.apply(ctx, sp, req)
		if serr != nil {
			return serr
		}
		if rerr != nil {
			errs[i] = rerr
			if err := sp.Rollback(ctx); err != nil {
				return err
			}
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return err
		}
		if req.rcpt != nil {
			linked = true
		}
		added = added || len(req.recs) > 0
	}
	if linked {
		if cp, ok := w.chain.Checkpoint(); ok {
			body, err := cp.MarshalJSON()
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO checkpoints (chain_id, seq, body) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
				cp.ChainID, int64(cp.Seq), body); err != nil {
				return err
			}
		}
	}
	if added {
		// Last before COMMIT: take the next feed number (feed_head's row
		// lock, held until the commit, makes numbers commit in order) and
		// notify followers of every replica, on commit.
		if w.s.beforeFeed != nil {
			w.s.beforeFeed()
		}
		if _, err := tx.Exec(ctx, feedStmt, w.s.lis.events); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.commits.Add(1)
	return nil
}

// apply runs one request inside its savepoint. rerr is the request's own
// refusal (roll back the savepoint, keep the batch); serr a storage
// failure (abort the batch).
func (w *writer) apply(ctx context.Context, tx pgx.Tx, req *request) (rerr, serr error) {
	req.seqs, req.recs = nil, nil
	if len(req.events) > 0 {
		if rerr, serr = insertEvents(ctx, tx, req, w.s.ChainID()); rerr != nil || serr != nil {
			return rerr, serr
		}
	}
	if req.rcpt == nil {
		return nil, nil
	}
	var storageErr error
	err := w.chain.AppendWith(req.rcpt, func(r *receipt.Receipt) error {
		body, err := r.MarshalJSON()
		if err != nil {
			return errcode.Wrap(errcode.InvalidArgument, err, req.op)
		}
		_, err = tx.Exec(ctx, `INSERT INTO receipts (chain_id, seq, receipt_id, tenant, body) VALUES ($1, $2, $3, $4, $5)`,
			r.ChainID, int64(r.Seq), r.ReceiptID, r.Tenant, body)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "receipts_receipt_id_key":
			return errcode.Errorf(errcode.Conflict, "%s: receiptId %q is already stored", req.op, r.ReceiptID).
				WithDetails(map[string]any{"field": "receiptId"})
		case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22"):
			return errcode.Wrap(errcode.InvalidArgument, err, req.op)
		}
		storageErr = err
		return err
	})
	if storageErr != nil {
		return nil, storageErr
	}
	return err, nil
}

// insertEvents checks req's events against the stored ones (idempotent
// re-append, conflicts), takes the new ones' sequences from run_heads and
// inserts them, marked with chainID (the writer's signing key id, "" for
// a Store without a Signer).
func insertEvents(ctx context.Context, tx pgx.Tx, req *request, chainID string) (rerr, serr error) {
	evs := req.events
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
	}
	rows, err := tx.Query(ctx, `SELECT `+eventCols+` FROM events WHERE event_id = ANY($1)`, ids)
	if err != nil {
		return classify(req.op, err)
	}
	stored := map[string]store.Record{}
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		stored[rec.Event.EventID] = rec
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify(req.op, err)
	}
	req.seqs = make([]int64, len(evs))
	counts := map[[2]string]int64{}
	var keys [][2]string
	for i, ev := range evs {
		if rec, ok := stored[ev.EventID]; ok {
			if !store.SameEvent(&rec.Event, ev) {
				return store.EventConflict(ev.EventID, i), nil
			}
			req.seqs[i] = rec.Event.Sequence
			continue
		}
		k := [2]string{ev.Tenant, ev.RunID}
		if _, ok := counts[k]; !ok {
			keys = append(keys, k)
		}
		counts[k]++
	}
	// Lock run heads in a fixed order, so that writers of several runs
	// rarely deadlock (and a deadlock is retried).
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	next := map[[2]string]int64{}
	for _, k := range keys {
		var end int64
		err := tx.QueryRow(ctx, `INSERT INTO run_heads (tenant, run_id, next_seq) VALUES ($1, $2, $3)
			ON CONFLICT (tenant, run_id) DO UPDATE SET next_seq = run_heads.next_seq + EXCLUDED.next_seq
			RETURNING next_seq`, k[0], k[1], counts[k]).Scan(&end)
		if err != nil {
			return classify(req.op, err)
		}
		next[k] = end - counts[k]
	}
	var (
		eids, tenants, principals, runs, types, tss, causes []string
		seqs                                                []int64
		schemas                                             []int32
		payloads                                            [][]byte
		idx                                                 []int
	)
	for i, ev := range evs {
		if _, ok := stored[ev.EventID]; ok {
			continue
		}
		k := [2]string{ev.Tenant, ev.RunID}
		req.seqs[i] = next[k]
		next[k]++
		eids, tenants, principals, runs = append(eids, ev.EventID), append(tenants, ev.Tenant), append(principals, ev.Principal), append(runs, ev.RunID)
		types, tss, causes = append(types, string(ev.Type)), append(tss, fmtTime(ev.Timestamp)), append(causes, ev.CausationID)
		seqs, schemas, payloads = append(seqs, req.seqs[i]), append(schemas, int32(ev.SchemaVersion)), append(payloads, []byte(ev.Payload))
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, nil
	}
	// chain_id records which replica (signing key) wrote the events, for
	// OpenCalls after a crash (migration 0004).
	rows, err = tx.Query(ctx, `INSERT INTO events (event_id, tenant, principal, run_id, seq, type, ts, causation_id, schema_version, payload, chain_id)
		SELECT e, t, p, r, s, ty, ts, c, sv, pl, $11 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bytea[])
			WITH ORDINALITY AS u(e, t, p, r, s, ty, ts, c, sv, pl, ord) ORDER BY ord
		RETURNING pos, event_id`, eids, tenants, principals, runs, seqs, types, tss, causes, schemas, payloads, chainID)
	if err != nil {
		return classify(req.op, err)
	}
	pos := map[string]int64{}
	for rows.Next() {
		var p int64
		var id string
		if err := rows.Scan(&p, &id); err != nil {
			rows.Close()
			return nil, err
		}
		pos[id] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify(req.op, err)
	}
	for _, i := range idx {
		ev := *evs[i]
		ev.Sequence = req.seqs[i]
		ev.Timestamp = ev.Timestamp.UTC()
		ev.Payload = append([]byte(nil), ev.Payload...)
		req.recs = append(req.recs, store.Record{Pos: pos[ev.EventID], Event: ev})
	}
	return nil, nil
}

// classify splits a statement's error into a request refusal (invalid
// data such as a NUL byte in a string: InvalidArgument) and a storage
// failure.
func classify(op string, err error) (rerr, serr error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		return errcode.Wrap(errcode.InvalidArgument, err, op), nil
	}
	return nil, err
}

// AppendEvents implements store.Events.AppendEvents (idempotent re-append
// included): the writer commits the events in a shared transaction.
func (s *Store) AppendEvents(ctx context.Context, events ...*audit.Event) error {
	const op = "append events"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	return s.submit(&request{ctx: ctx, op: op, events: events})
}

// AppendReceipt implements store.Receipts.AppendReceipt: the writer links
// r inside the transaction that stores it, with a checkpoint over the
// batch's last receipt.
func (s *Store) AppendReceipt(ctx context.Context, r *receipt.Receipt) error {
	const op = "append receipt"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append receipt: nil receipt")
	}
	if s.noRcpt {
		return errNoReceipts(op)
	}
	return s.submit(&request{ctx: ctx, op: op, rcpt: r})
}

// AppendOutcome implements store.Outcomes: events and r in one savepoint
// of one transaction, both or neither.
func (s *Store) AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error {
	const op = "append outcome"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append outcome: nil receipt")
	}
	if s.noRcpt {
		return errNoReceipts(op)
	}
	if len(events) > 0 {
		if err := store.CheckEvents(events); err != nil {
			return err
		}
	}
	return s.submit(&request{ctx: ctx, op: op, events: events, rcpt: r})
}

// errNoReceipts is the refusal of a receipt by a Store opened with
// Options.NoReceipts.
func errNoReceipts(op string) error {
	return errcode.Errorf(errcode.InvalidArgument, "%s: this store was opened without a receipt chain (Options.NoReceipts)", op)
}
