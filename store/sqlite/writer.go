package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// reqKind tells what a request carries.
type reqKind uint8

const (
	kindEvents  reqKind = iota // events: append them
	kindReceipt                // rcpt: link and store it
	kindOp                     // op: run it in the transaction
	kindOutcome                // events and rcpt: append both, or neither
)

// request is one caller's write, owned by the writer from the moment it is
// queued until done is signalled.
type request struct {
	kind   reqKind
	ctx    context.Context
	events []*audit.Event
	rcpt   *receipt.Receipt
	op     func(w *writer) error

	seqs    []int64 // kindEvents, kindOutcome: the sequence of each event
	recFrom int     // index in writer.recs of the request's first stored event (set by flush)
	err     error
	done    chan struct{} // receives one value when the request is finished
}

// size is the request's item count for MaxBatch.
func (r *request) size() int {
	switch r.kind {
	case kindEvents:
		return len(r.events)
	case kindOutcome:
		return len(r.events) + 1
	}
	return 1
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// runKey identifies a run.
type runKey struct{ tenant, runID string }

// lingerGap is how long the writer waits for the next request of a batch
// it expects to grow (see commitBatch) before it commits.
const lingerGap = 250 * time.Microsecond

// maxOpen bounds writer.open.
const maxOpen = 1 << 12

// maxSeqCache bounds the per-run sequence cache; past it, the cache is
// dropped and rebuilt from the database on demand.
const maxSeqCache = 1 << 16

// errFatal marks a storage failure inside AppendWith's commit callback (the
// cause is in writer.fatal).
var errFatal = errors.New("storage failure")

// writer is the group-commit writer: one goroutine that owns the write
// connection.
type writer struct {
	conn     *sql.Conn
	st       stmts
	signer   *receipt.Signer
	log      *slog.Logger
	maxBatch int
	maxDelay time.Duration
	now      func() time.Time // checkpoints' clock (Options.Now)
	feed     *store.Feed
	ckpt     *checkpointer

	reqs    chan *request
	timer   *time.Timer // the linger timer; stopped when idle
	stop    chan struct{}
	done    chan struct{}
	closing atomic.Bool
	stopped sync.Once

	// Writer goroutine state.
	chain     *receipt.Chain
	headBody  []byte           // canonical body of the last committed receipt of chain, nil if none
	broken    error            // the chain could not be restored: every write fails
	lastPos   int64            // pos of the last committed event
	seqs      map[runKey]int64 // next sequence per run, as committed
	pending   map[runKey]int64 // next sequence per run, changed in the open transaction
	headless  bool             // run_heads was empty when the open transaction began (see stageSeq)
	prevReqs  int              // requests in the previous batch
	open      int              // calls whose agent.toolCalled committed and whose outcome has not come yet (an estimate; see commitBatch)
	outcomes  bool             // the previous batch held an outcome (AppendOutcome)
	batch     []*request       // the open transaction's requests
	stage     stager           // events waiting for a multi-row insert
	recs      []store.Record   // events stored in the open transaction, in pos order
	linked    []byte           // canonical body of the last receipt linked in the open transaction
	fatal     error            // the storage failure that dooms the open transaction
	failHook  atomic.Pointer[func() error]
	batchHook func(n int) // tests: called with each committed batch's request count

	// The journal (nil: every batch commits to SQLite; see journal.go).
	j          *journal
	frame      jFrame    // the open batch's rows, for its journal frame
	inTx       bool      // the SQLite transaction holding acknowledged rows is open
	txLost     bool      // acknowledged rows are in the journal only: replay them into the next transaction
	txSince    time.Time // when the open transaction began
	txItems    int       // items acknowledged in the open transaction
	applyEvery time.Duration
	applyTimer *time.Timer
	wantApply  chan struct{} // a reader waits for the journal to be applied (barrier)
	acked      atomic.Int64  // journal frames acknowledged (written) so far
	applied    atomic.Int64  // acked as of the last commit of the SQLite transaction
	applyErr   atomic.Pointer[error]
	applyMu    sync.Mutex
	appliedCh  chan struct{} // closed (and replaced) after every apply attempt
	replayHook func()        // tests: called when acknowledged rows are replayed into a new transaction
}

// Journal tuning: the SQLite transaction that holds acknowledged rows is
// committed (applied) once it is applyEvery old or holds applyItems items,
// when a reader waits for it (barrier), before an operation that is not
// journaled (approvals, sessions, prune) commits, and at Close.
const (
	defaultApplyEvery = 100 * time.Millisecond
	applyItems        = 16384
)

// stmts are the writer's prepared statements, bound to its connection.
type stmts struct {
	insertEvent, findEvent, maxSeq       *sql.Stmt
	findHead, anyHead                    *sql.Stmt
	insertReceipt, insertCheckpoint      *sql.Stmt
	insertApproval, findApproval         *sql.Stmt
	updateApproval                       *sql.Stmt
	insertSession, findSession, closeSes *sql.Stmt
}

// newWriter prepares the writer on conn: statements, the last event
// position, and the chain resumed after the last stored receipt (its head
// checkpointed if no stored checkpoint covers it).
func newWriter(ctx context.Context, conn *sql.Conn, s *Store, opts Options, j *journal) (*writer, error) {
	w := &writer{
		conn: conn, signer: opts.Signer, log: s.log, maxBatch: opts.MaxBatch, maxDelay: opts.MaxDelay, now: opts.Now,
		reqs: make(chan *request, opts.QueueSize), stop: make(chan struct{}), done: make(chan struct{}),
		seqs: map[runKey]int64{}, pending: map[runKey]int64{}, timer: time.NewTimer(time.Hour),
		j: j, applyEvery: defaultApplyEvery, applyTimer: time.NewTimer(time.Hour),
		wantApply: make(chan struct{}, 1), appliedCh: make(chan struct{}),
	}
	w.timer.Stop()
	w.applyTimer.Stop()
	var err error
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&w.st.insertEvent, `INSERT INTO events (` + eventColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING`},
		{&w.st.findEvent, `SELECT ` + eventCols + ` FROM events WHERE event_id = ?`},
		{&w.st.maxSeq, `SELECT MAX(s) FROM (SELECT MAX(seq) AS s FROM events WHERE tenant = ?1 AND run_id = ?2
			UNION ALL SELECT last_seq FROM run_heads WHERE tenant = ?1 AND run_id = ?2)`},
		{&w.st.findHead, `SELECT EXISTS (SELECT 1 FROM run_heads WHERE tenant = ? AND run_id = ?)`},
		{&w.st.anyHead, `SELECT EXISTS (SELECT 1 FROM run_heads)`},
		{&w.st.insertReceipt, `INSERT INTO receipts (chain_id, seq, receipt_id, tenant, body) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (receipt_id) DO NOTHING`},
		{&w.st.insertCheckpoint, `INSERT INTO checkpoints (chain_id, seq, body) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`},
		{&w.st.insertApproval, `INSERT INTO approvals (id, tenant, principal, tool_id, args_hash, status, created_at, expires_at, resolved_by, reason, resolved_at, args_binding, args_summary, request_reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`},
		{&w.st.findApproval, `SELECT ` + approvalCols + ` FROM approvals WHERE id = ?`},
		{&w.st.updateApproval, `UPDATE approvals SET status = ?, resolved_by = ?, reason = ?, resolved_at = ? WHERE id = ?`},
		{&w.st.insertSession, `INSERT INTO sessions (session_id, tenant, run_id, tool_id, server, opened_at, closed_at, outcome)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING`},
		{&w.st.findSession, `SELECT ` + sessionCols + ` FROM sessions WHERE session_id = ?`},
		{&w.st.closeSes, `UPDATE sessions SET closed_at = ?, outcome = ? WHERE session_id = ?`},
	} {
		if *p.dst, err = conn.PrepareContext(ctx, p.q); err != nil {
			w.close()
			return nil, store.Unavailable("open store: prepare", err)
		}
	}
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(pos), 0) FROM events").Scan(&w.lastPos); err != nil {
		w.close()
		return nil, store.Unavailable("open store: last event", err)
	}
	if err := w.resume(ctx); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// resume loads the chain head of the signer's chain and checkpoints it if
// no stored checkpoint covers it.
func (w *writer) resume(ctx context.Context) error {
	var body []byte
	err := w.conn.QueryRowContext(ctx, "SELECT body FROM receipts WHERE chain_id = ? ORDER BY seq DESC LIMIT 1", w.signer.KeyID()).Scan(&body)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		w.chain = receipt.NewChain(w.signer, receipt.Options{Now: w.now})
		return nil
	case err != nil:
		return store.Unavailable("open store: chain head", err)
	}
	head := new(receipt.Receipt)
	if err := head.UnmarshalJSON(body); err != nil {
		return errcode.Wrap(errcode.AuditUnavailable, err, "open store: decode chain head")
	}
	chain, err := receipt.ResumeChain(w.signer, head, receipt.Options{Now: w.now})
	if err != nil {
		return errcode.Wrap(errcode.AuditUnavailable, err, "open store: resume chain")
	}
	w.chain, w.headBody = chain, body
	var covered sql.NullInt64
	if err := w.conn.QueryRowContext(ctx, "SELECT MAX(seq) FROM checkpoints WHERE chain_id = ?", w.signer.KeyID()).Scan(&covered); err != nil {
		return store.Unavailable("open store: checkpoints", err)
	}
	if covered.Valid && uint64(covered.Int64) >= head.Seq {
		return nil
	}
	// Every batch that links receipts stores its checkpoint in the same
	// transaction, so toolgate never leaves a head uncovered: receipts (or
	// checkpoints) were changed by something else. Signing the head now
	// would vouch for them, and so would every later checkpoint of a chain
	// extended from it; refuse every write instead, and let reads (export,
	// verify) show what is there.
	highest := "none"
	if covered.Valid {
		highest = "seq " + strconv.FormatInt(covered.Int64, 10)
	}
	w.broken = errcode.Errorf(errcode.AuditUnavailable,
		"receipt chain %s: the stored head (seq %d) is not covered by a signed checkpoint (highest: %s): receipts or checkpoints were changed outside toolgate; "+
			"run `toolgate receipts verify` and restore the database from a backup; every write is refused", w.signer.KeyID(), head.Seq, highest).
		WithDetails(map[string]any{"chainId": w.signer.KeyID(), "seq": head.Seq})
	w.log.Error("store: refusing writes", "err", w.broken)
	return nil
}

// close closes the prepared statements (not the connection's pool).
func (w *writer) close() error {
	errs := w.closeStage()
	for _, st := range []*sql.Stmt{w.st.insertEvent, w.st.findEvent, w.st.maxSeq, w.st.findHead, w.st.anyHead, w.st.insertReceipt, w.st.insertCheckpoint,
		w.st.insertApproval, w.st.findApproval, w.st.updateApproval, w.st.insertSession, w.st.findSession, w.st.closeSes} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if w.conn != nil {
		errs = append(errs, w.conn.Close())
		w.conn = nil
	}
	errs = append(errs, w.j.close())
	return errors.Join(errs...)
}

// submit queues r and waits for its outcome. It blocks while the queue is
// full (back-pressure), giving up when r.ctx ends; once r is queued it
// waits for the writer whatever r.ctx says, so that an error always means
// nothing was stored.
func (w *writer) submit(op string, r *request) error {
	if w.closing.Load() {
		return store.ErrClosed(op)
	}
	select {
	case w.reqs <- r:
	case <-r.ctx.Done():
		return store.ContextError(r.ctx, op)
	case <-w.done:
		return store.ErrClosed(op)
	}
	select {
	case <-r.done:
		return r.err
	case <-w.done:
		select {
		case <-r.done:
			return r.err
		default:
			return store.ErrClosed(op) // queued after the writer's last look: never applied
		}
	}
}

// stopAndWait makes the writer commit what is queued and exit, and waits
// for it.
func (w *writer) stopAndWait() {
	w.stopped.Do(func() {
		w.closing.Store(true)
		close(w.stop)
	})
	<-w.done
}

// run is the writer goroutine.
func (w *writer) run() {
	defer close(w.done)
	for {
		r := w.next()
		if r == nil {
			w.applyNow()
			return
		}
		w.commitBatch(r)
		if w.inTx && (w.txItems >= applyItems || time.Since(w.txSince) >= w.applyEvery) {
			w.applyNow()
		} else if w.inTx {
			select {
			case <-w.wantApply:
				w.applyNow()
			default:
			}
		}
	}
}

// next waits for the first request of the next batch; nil means the writer
// must exit (stop was requested and the queue is empty). While it waits it
// lets the WAL restart when that is due (see checkpointer).
func (w *writer) next() *request {
	for w.inTx {
		// Acknowledged rows wait in the open transaction: apply them when
		// they are due or a reader asks, whichever comes first.
		wait := time.Until(w.txSince.Add(w.applyEvery))
		if wait <= 0 {
			w.applyNow()
			break
		}
		w.applyTimer.Reset(wait)
		select {
		case r := <-w.reqs:
			w.applyTimer.Stop()
			return r
		case <-w.wantApply:
			w.applyTimer.Stop()
			w.applyNow()
		case <-w.applyTimer.C:
			w.applyNow()
		case <-w.stop:
			w.applyTimer.Stop()
			select {
			case r := <-w.reqs:
				return r
			default:
				return nil
			}
		}
	}
	if frames := w.ckpt.frames.Load(); frames >= hardWALFrames {
		w.restartWAL()
	} else if frames >= softWALFrames {
		w.timer.Reset(idleRestart)
		select {
		case r := <-w.reqs:
			w.timer.Stop()
			return r
		case <-w.timer.C:
			w.restartWAL()
		case <-w.stop:
			w.timer.Stop()
		}
	}
	for {
		select {
		case r := <-w.reqs:
			return r
		case <-w.wantApply:
			w.applyNow() // nothing is pending unless a transaction was lost
		case <-w.stop:
			select {
			case r := <-w.reqs:
				return r
			default:
				return nil
			}
		}
	}
}

// restartWAL checkpoints from the writer's connection, between two
// transactions, so that its next transaction restarts the WAL.
func (w *writer) restartWAL() {
	w.ckpt.frames.Store(0) // until the next background pass says otherwise
	if _, err := walCheckpoint(context.Background(), w.conn); err != nil {
		w.log.Warn("store: WAL checkpoint failed", "err", err)
	}
}

// commitBatch runs one transaction: it applies first and then every queued
// request it can take without waiting (up to maxBatch items and maxDelay),
// checkpoints the chain if receipts were linked, commits, and finishes every
// request.
func (w *writer) commitBatch(first *request) {
	w.batch, w.recs, w.linked, w.fatal = w.batch[:0], w.recs[:0], nil, nil
	w.frame.reset()
	clear(w.pending)
	if err := w.begin(); err != nil {
		w.fatal = err
		w.batch = append(w.batch, first)
		w.finish()
		return
	}
	deadline := time.Now().Add(w.maxDelay)
	items, called, outcomes, ops := 0, 0, false, false
	r := first
take:
	for {
		w.batch = append(w.batch, r)
		items += r.size()
		switch r.kind {
		case kindEvents:
			for _, ev := range r.events {
				if ev.Type == audit.TypeToolCalled {
					called++
				}
			}
		case kindOutcome:
			w.open = max(w.open-1, 0)
			outcomes = true
		case kindOp:
			ops = true
		}
		w.apply(r)
		if w.fatal != nil || items >= w.maxBatch || time.Now().After(deadline) {
			break
		}
		select {
		case r = <-w.reqs:
			continue
		default:
		}
		// The queue is empty. Under concurrency the callers of the previous
		// batch are about to come back: wait for as many requests as it
		// had, as long as they keep coming (each within lingerGap of the
		// last), until the deadline. A lone caller (previous batch of one)
		// never waits.
		//
		// Calls that are running a tool (their agent.toolCalled committed)
		// will write their outcome soon: while there are such calls, and
		// outcomes are being written (this batch or the previous one held
		// one; a writer of events alone never waits for outcomes), wait for
		// them up to the deadline. A wait that times out halves the
		// estimate, so that calls that never write an outcome (a failed
		// write, a slow tool) stop being waited for.
		var wait time.Duration
		switch {
		case w.open > 0 && (outcomes || w.outcomes):
			wait = time.Until(deadline)
		case len(w.batch) < w.prevReqs:
			wait = min(lingerGap, time.Until(deadline))
		default:
			break take
		}
		if wait <= 0 {
			break
		}
		w.timer.Reset(wait)
		select {
		case r = <-w.reqs:
			w.timer.Stop()
		case <-w.timer.C:
			w.open /= 2
			break take
		case <-w.stop:
			w.timer.Stop()
			break take
		}
	}
	w.prevReqs, w.outcomes = len(w.batch), outcomes
	defer func() {
		if w.fatal == nil {
			w.open = min(w.open+called, maxOpen)
		}
	}()
	if w.fatal == nil {
		w.flush()
	}
	if w.fatal == nil && w.linked != nil {
		w.checkpoint()
	}
	if w.fatal == nil {
		if hook := w.failHook.Load(); hook != nil {
			w.fatal = (*hook)()
		}
	}
	switch {
	case w.fatal != nil:
	case w.j == nil:
		if _, err := w.conn.ExecContext(context.Background(), "COMMIT"); err != nil {
			w.fatal = err
		}
	case ops:
		// Operations (approvals, sessions, prune) are not journaled: they
		// are durable once SQLite committed them, with every acknowledged
		// row before them.
		w.txItems += items
		if err := w.commitTx(); err != nil {
			w.fatal = err
		}
	default:
		w.journalBatch()
		w.txItems += items
	}
	w.finish()
}

// begin opens the batch's transaction: a new one per batch without a
// journal; with one, the transaction that holds acknowledged rows until the
// next apply, opened if needed (and filled from the journal first if the
// previous one was lost).
func (w *writer) begin() error {
	if w.j != nil && w.inTx {
		return nil
	}
	if _, err := w.conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	// The transaction holds SQLite's write lock: no other writer (the CLI's
	// audit prune beside serve) can add run heads before it ends.
	var heads bool
	if err := w.st.anyHead.QueryRow().Scan(&heads); err != nil {
		w.abortTx()
		return err
	}
	w.headless = !heads
	if w.j == nil {
		return nil
	}
	w.inTx, w.txSince, w.txItems = true, time.Now(), 0
	if !w.txLost {
		return nil
	}
	frames, err := w.j.recover()
	if err == nil {
		err = replayFrames(context.Background(), w.conn, frames)
	}
	if err != nil {
		w.inTx = false
		w.abortTx()
		return errcode.Wrap(errcode.AuditUnavailable, err, "store write: replaying the journal into the database")
	}
	w.txLost = false
	if w.replayHook != nil {
		w.replayHook()
	}
	return nil
}

// abortTx rolls the open transaction back after a failed statement; its
// own failure is only logged (SQLite may have rolled back already).
func (w *writer) abortTx() {
	if _, err := w.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		w.log.Debug("store: rollback", "err", err)
	}
}

// journalBatch appends the batch's rows to the journal as one frame: the
// batch is durable (and acknowledged) once it is written.
func (w *writer) journalBatch() {
	for i := range w.recs {
		ev := &w.recs[i].Event
		w.frame.Events = append(w.frame.Events, jEvent{Pos: w.recs[i].Pos, Seq: ev.Sequence, EventID: ev.EventID, Tenant: ev.Tenant,
			RunID: ev.RunID, Type: ev.Type, TS: fmtTime(ev.Timestamp), CausationID: ev.CausationID,
			SchemaVersion: int64(ev.SchemaVersion), Payload: ev.Payload, Principal: ev.Principal})
	}
	if w.frame.empty() {
		return // idempotent re-appends, refused requests: nothing new
	}
	cutFailed, err := w.j.append(&w.frame)
	if err != nil {
		w.fatal = err
		if cutFailed {
			w.broken = errcode.Wrap(errcode.AuditUnavailable, err, "store write: the journal could not be cut back after a failed write; every write is refused")
		}
		return
	}
	w.acked.Add(1)
}

// commitTx commits the journaled transaction and truncates the journal.
// On failure the transaction is rolled back and marked lost: the next one
// replays the journal.
func (w *writer) commitTx() error {
	if !w.inTx {
		return nil
	}
	if _, err := w.conn.ExecContext(context.Background(), "COMMIT"); err != nil {
		w.abortTx()
		w.inTx, w.txLost = false, true
		clear(w.seqs)
		return err
	}
	w.inTx, w.txItems = false, 0
	if err := w.j.truncate(); err != nil {
		// Its frames are committed: a replay inserts nothing twice.
		w.log.Warn("store: truncating the journal failed", "err", err)
	}
	w.ckpt.committed()
	return nil
}

// applyNow commits the acknowledged rows to SQLite (see commitTx) and wakes
// the readers waiting for them (barrier).
func (w *writer) applyNow() {
	if w.j == nil {
		return
	}
	target := w.acked.Load()
	var err error
	if w.txLost && !w.inTx {
		err = w.begin()
	}
	if err == nil {
		err = w.commitTx()
	}
	if err != nil {
		w.log.Error("store: applying the journal to the database failed; it stays in the journal", "err", err)
		w.applyErr.Store(&err)
	} else {
		w.applyErr.Store(nil)
		w.applied.Store(target)
	}
	w.applyMu.Lock()
	close(w.appliedCh)
	w.appliedCh = make(chan struct{})
	w.applyMu.Unlock()
}

// barrier waits until every row acknowledged before it was called is
// committed to SQLite, so that a read after it sees them; a no-op without a
// journal. Errors (*errcode.Error): Cancelled or Timeout when ctx ends;
// AuditUnavailable when the apply failed; StoreClosed-like ErrClosed after
// Close with rows unapplied.
func (w *writer) barrier(ctx context.Context, op string) error {
	if w == nil || w.j == nil {
		return nil
	}
	target := w.acked.Load()
	for {
		w.applyMu.Lock()
		ch := w.appliedCh
		w.applyMu.Unlock()
		if w.applied.Load() >= target {
			return nil
		}
		select {
		case w.wantApply <- struct{}{}:
		default:
		}
		select {
		case <-ch:
			if w.applied.Load() >= target {
				return nil
			}
			if e := w.applyErr.Load(); e != nil {
				return errcode.Wrap(errcode.AuditUnavailable, *e, op+": the journal could not be applied to the database")
			}
		case <-ctx.Done():
			return store.ContextError(ctx, op)
		case <-w.done:
			if w.applied.Load() >= target {
				return nil
			}
			return store.ErrClosed(op)
		}
	}
}

// apply runs one request inside the open transaction, setting r.err for a
// failure of r alone and w.fatal for a storage failure.
func (w *writer) apply(r *request) {
	if err := store.ContextError(r.ctx, "store write"); err != nil {
		r.err = err
		return
	}
	if w.broken != nil {
		w.fatal = w.broken
		return
	}
	switch r.kind {
	case kindEvents:
		w.stageEvents(r)
	case kindReceipt:
		r.err = w.applyReceipt(r)
	case kindOutcome:
		w.applyOutcome(r)
	case kindOp:
		// Staged rows go in first: an operation reads and deletes stored
		// rows (a prune records run heads from the events it deletes), and
		// a staged row's sequence was chosen against the rows stored
		// before the operation (see stageSeq).
		w.flush()
		if w.fatal != nil {
			return
		}
		err := r.op(w)
		if err != nil && errcode.As(err) == nil {
			w.fatal = err
		}
		r.err = err
	}
}

// checkpoint signs the chain's new head and stores the checkpoint in the
// open transaction.
func (w *writer) checkpoint() {
	cp, ok := w.chain.Checkpoint()
	if !ok {
		return
	}
	body, err := cp.MarshalJSON()
	if err == nil {
		_, err = w.st.insertCheckpoint.Exec(cp.ChainID, int64(cp.Seq), body)
	}
	if err != nil {
		w.fatal = err
		return
	}
	if w.j != nil {
		w.frame.Checkpoints = append(w.frame.Checkpoints, jCheckpoint{ChainID: cp.ChainID, Seq: cp.Seq, Body: body})
	}
}

// finish ends the open transaction: on success it publishes the state and
// results; on a storage failure it rolls back, restores the in-memory state
// to the last commit and fails every request of the batch with
// AuditUnavailable. Then it signals every request.
func (w *writer) finish() {
	if w.fatal != nil {
		w.rollback()
	} else {
		for k, v := range w.pending {
			w.seqs[k] = v
		}
		if len(w.seqs) > maxSeqCache {
			clear(w.seqs)
		}
		if w.linked != nil {
			w.headBody = w.linked
		}
		if n := len(w.recs); n > 0 {
			w.lastPos = w.recs[n-1].Pos
			w.feed.Publish(w.recs)
		}
		for _, r := range w.batch {
			if (r.kind == kindEvents || r.kind == kindOutcome) && r.err == nil {
				for i, ev := range r.events {
					ev.Sequence = r.seqs[i]
				}
			}
		}
		if w.batchHook != nil {
			w.batchHook(len(w.batch))
		}
	}
	committed := w.fatal == nil
	for _, r := range w.batch {
		r.done <- struct{}{}
	}
	clear(w.batch)
	clear(w.recs)
	w.linked = nil
	if committed {
		w.ckpt.committed()
	}
}

// rollback undoes the failed transaction and the writer's in-memory state.
func (w *writer) rollback() {
	cause := w.fatal
	w.abortTx()
	if w.j != nil && w.inTx {
		// The transaction held acknowledged rows of earlier batches too:
		// they are in the journal, and the next transaction replays them.
		w.inTx, w.txLost = false, w.j.size > 0
	}
	w.frame.reset()
	clear(w.seqs)
	clear(w.pending)
	w.resetStage()
	if w.linked != nil {
		if err := w.restoreChain(); err != nil {
			w.broken = err
			w.log.Error("store: cannot restore the receipt chain; refusing every write", "err", err)
		}
	}
	w.log.Error("store: batch failed, nothing of it was stored", "requests", len(w.batch), "err", cause)
	for _, r := range w.batch {
		if (r.kind == kindReceipt || r.kind == kindOutcome) && r.rcpt != nil && r.rcpt.Hash != "" {
			r.rcpt.ChainID, r.rcpt.Seq, r.rcpt.PrevHash, r.rcpt.Hash, r.rcpt.Sig = "", 0, "", "", ""
		}
		r.err = errcode.Wrap(errcode.AuditUnavailable, cause, "store write: the batch was not committed")
	}
}

// exec runs statements on the write connection, stopping at the first
// error.
func (w *writer) exec(queries ...string) error {
	for _, q := range queries {
		if _, err := w.conn.ExecContext(context.Background(), q); err != nil {
			return err
		}
	}
	return nil
}

// restoreChain resumes the chain after the last committed receipt.
func (w *writer) restoreChain() error {
	var head *receipt.Receipt
	if w.headBody != nil {
		head = new(receipt.Receipt)
		if err := head.UnmarshalJSON(w.headBody); err != nil {
			return err
		}
	}
	chain, err := receipt.ResumeChain(w.signer, head, receipt.Options{Now: w.now})
	if err != nil {
		return err
	}
	w.chain = chain
	return nil
}

// cachedSeq returns the next sequence of run k as the writer knows it
// without SQLite: changed in the open transaction, else as committed.
func (w *writer) cachedSeq(k runKey) (int64, bool) {
	if n, ok := w.pending[k]; ok {
		return n, true
	}
	n, ok := w.seqs[k]
	return n, ok
}

// nextSeq returns the next sequence of run k in the open transaction.
func (w *writer) nextSeq(k runKey) (int64, error) {
	if n, ok := w.cachedSeq(k); ok {
		return n, nil
	}
	var max sql.NullInt64
	if err := w.st.maxSeq.QueryRow(k.tenant, k.runID).Scan(&max); err != nil {
		return 0, err
	}
	if !max.Valid {
		return 0, nil
	}
	return max.Int64 + 1, nil
}

// applyEvents stores r's new events one by one, reusing the stored
// sequence of events already stored (idempotent re-append); flush falls
// back to it. A multi-event request runs in a savepoint so that a conflict
// undoes its earlier inserts.
func (w *writer) applyEvents(r *request) error {
	multi := len(r.events) > 1
	var undo map[runKey]int64 // pending values before this request; -1: absent
	if multi {
		if _, err := w.conn.ExecContext(context.Background(), "SAVEPOINT req"); err != nil {
			w.fatal = err
			return nil
		}
		undo = map[runKey]int64{}
	}
	recs := len(w.recs)
	for i, ev := range r.events {
		k := runKey{ev.Tenant, ev.RunID}
		n, err := w.nextSeq(k)
		if err != nil {
			w.fatal = err
			return nil
		}
		res, err := w.st.insertEvent.Exec(ev.EventID, ev.Tenant, ev.RunID, n, ev.Type, fmtTime(ev.Timestamp),
			ev.CausationID, ev.SchemaVersion, []byte(ev.Payload), ev.Principal)
		if err != nil {
			w.fatal = err
			return nil
		}
		if affected, err := res.RowsAffected(); err != nil || affected == 0 {
			if err != nil {
				w.fatal = err
				return nil
			}
			stored, _, err := scanEvent(w.st.findEvent.QueryRow(ev.EventID))
			if err != nil {
				w.fatal = err
				return nil
			}
			if !store.SameEvent(&stored, ev) {
				conflict := store.EventConflict(ev.EventID, i)
				if multi {
					if err := w.exec("ROLLBACK TO req", "RELEASE req"); err != nil {
						w.fatal = err
						return nil
					}
					for k, v := range undo {
						if v < 0 {
							delete(w.pending, k)
						} else {
							w.pending[k] = v
						}
					}
					clear(w.recs[recs:])
					w.recs = w.recs[:recs]
				}
				return conflict
			}
			r.seqs[i] = stored.Sequence
			continue
		}
		pos, err := res.LastInsertId()
		if err != nil {
			w.fatal = err
			return nil
		}
		if multi {
			if _, seen := undo[k]; !seen {
				old, ok := w.pending[k]
				if !ok {
					old = -1
				}
				undo[k] = old
			}
		}
		w.pending[k] = n + 1
		r.seqs[i] = n
		stored := *ev
		stored.Sequence = n
		stored.Timestamp = ev.Timestamp.UTC()
		w.recs = append(w.recs, store.Record{Pos: pos, Event: stored})
	}
	if multi {
		if _, err := w.conn.ExecContext(context.Background(), "RELEASE req"); err != nil {
			w.fatal = err
			return nil
		}
	}
	return nil
}

// applyReceipt links r.rcpt through the chain, storing it in the commit
// callback so that a refused insert leaves the chain where it was.
func (w *writer) applyReceipt(r *request) error {
	rc := r.rcpt
	var body []byte
	err := w.chain.AppendWith(rc, func(rc *receipt.Receipt) error {
		var err error
		body, err = rc.MarshalJSON()
		if err != nil {
			return err // an *errcode.Error InvalidArgument
		}
		res, err := w.st.insertReceipt.Exec(rc.ChainID, int64(rc.Seq), rc.ReceiptID, rc.Tenant, body)
		if err != nil {
			w.fatal = err
			return errFatal
		}
		affected, err := res.RowsAffected()
		if err != nil {
			w.fatal = err
			return errFatal
		}
		if affected == 0 {
			return errcode.Errorf(errcode.Conflict, "append receipt: receiptId %q is already stored", rc.ReceiptID).
				WithDetails(map[string]any{"field": "receiptId"})
		}
		return nil
	})
	if errors.Is(err, errFatal) {
		return nil
	}
	if err == nil {
		w.linked = body
		if w.j != nil {
			w.frame.Receipts = append(w.frame.Receipts, jReceipt{ChainID: rc.ChainID, Seq: rc.Seq, ReceiptID: rc.ReceiptID, Tenant: rc.Tenant, Body: body})
		}
	}
	return err
}

// applyOutcome appends r's events and then links r.rcpt, both or neither.
// The events are flushed at once (with whatever was staged before them),
// so that they are the last rows inserted: if the receipt is then refused
// (a duplicate receiptId, a receipt the chain rejects), deleting them
// leaves no gap in any run's sequence, and positions are never reused
// (AUTOINCREMENT).
func (w *writer) applyOutcome(r *request) {
	w.stageEvents(r)
	w.flush()
	if w.fatal != nil || r.err != nil {
		return
	}
	r.err = w.applyReceipt(r)
	if r.err == nil || w.fatal != nil || r.recFrom >= len(w.recs) {
		return
	}
	// Undo r's new events: they are w.recs[r.recFrom:], the last rows.
	added := w.recs[r.recFrom:]
	if _, err := w.conn.ExecContext(context.Background(), "DELETE FROM events WHERE pos >= ?", added[0].Pos); err != nil {
		w.fatal = err
		return
	}
	for i := len(added) - 1; i >= 0; i-- { // ends with each run's lowest sequence
		ev := &added[i].Event
		w.pending[runKey{ev.Tenant, ev.RunID}] = ev.Sequence
	}
	clear(added)
	w.recs = w.recs[:r.recFrom]
}
