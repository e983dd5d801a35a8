// Package memstore is an in-memory store.Store for tests, development and
// embedding without a database. It behaves exactly like the durable
// backends (it passes store/storetest) except that it is not durable: a
// restart loses everything. It is unbounded: it keeps every record until
// the process exits, and its time-range reads scan the tenant's events.
//
// Receipts are linked through a receipt.Chain like in every backend; the
// signed checkpoint covering the newest receipts is made lazily, when a
// reader asks for checkpoints (Checkpoints, ExportReceipts), so appends stay
// cheap.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

var (
	_ store.Store    = (*Store)(nil)
	_ store.Outcomes = (*Store)(nil)
)

// Options configures a Store. The zero value is valid.
type Options struct {
	// Signer signs the receipt chain; nil generates an ephemeral key.
	Signer *receipt.Signer
	// FollowBuffer is each follower's live buffer in events (store.FeedOptions
	// Buffer); 0 means 256.
	FollowBuffer int
}

// runKey identifies a run: runs are tenant-scoped.
type runKey struct{ tenant, runID string }

// Store is the in-memory backend. All methods are safe for concurrent use;
// writes are serialised by one mutex.
type Store struct {
	signer *receipt.Signer
	chain  *receipt.Chain
	feed   *store.Feed

	mu        sync.RWMutex
	closed    bool
	events    []*audit.Event              // by pos-1; immutable copies
	ids       map[string]int64            // eventId → pos
	runs      map[runKey][]int64          // positions by sequence
	tenants   map[string][]int64          // positions by tenant, ascending
	receipts  []*receipt.Receipt          // this store's chain, by seq; immutable copies
	rcptIDs   map[string]*receipt.Receipt // receiptId → receipt
	cps       []*receipt.Checkpoint       // by seq
	approvals map[string]*store.Approval
	sessions  map[string]*store.Session
	recorded  map[recKey][]byte // tenant, callId → the recorded call's JSON
	recRuns   map[runKey][]recKey
	pins      map[string]store.Pin
}

// recKey identifies a recorded call: call ids are tenant-scoped.
type recKey struct{ tenant, callID string }

// New returns an empty Store. Errors: errcode.Internal if no signer is
// given and generating a key fails.
func New(opts Options) (*Store, error) {
	signer := opts.Signer
	if signer == nil {
		key, err := receipt.GenerateKey()
		if err != nil {
			return nil, err
		}
		signer = receipt.NewSigner(key)
	}
	s := &Store{
		signer:    signer,
		chain:     receipt.NewChain(signer, receipt.Options{}),
		ids:       map[string]int64{},
		runs:      map[runKey][]int64{},
		tenants:   map[string][]int64{},
		rcptIDs:   map[string]*receipt.Receipt{},
		approvals: map[string]*store.Approval{},
		sessions:  map[string]*store.Session{},
		recorded:  map[recKey][]byte{},
		recRuns:   map[runKey][]recKey{},
		pins:      map[string]store.Pin{},
	}
	s.feed = store.NewFeed(s.readAfter, 0, store.FeedOptions{Buffer: opts.FollowBuffer})
	return s, nil
}

// Close closes every follower's channel; later calls fail with
// AuditUnavailable. Idempotent; always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.feed.Close()
	return nil
}

// AppendEvents implements store.Events.AppendEvents (idempotent re-append
// included).
func (s *Store) AppendEvents(ctx context.Context, events ...*audit.Event) error {
	if err := store.ContextError(ctx, "append events"); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("append events")
	}
	seqs, err := s.checkEvents(events)
	if err != nil {
		return err
	}
	s.storeEvents(events, seqs)
	return nil
}

// checkEvents checks every event before anything is changed (a batch is
// atomic) and returns the sequence of each: the next ones of their runs,
// or the stored one of an idempotent re-append. The caller holds s.mu.
func (s *Store) checkEvents(events []*audit.Event) ([]int64, error) {
	seqs := make([]int64, len(events))
	next := map[runKey]int64{}
	for i, ev := range events {
		if pos, ok := s.ids[ev.EventID]; ok {
			stored := s.events[pos-1]
			if !store.SameEvent(stored, ev) {
				return nil, store.EventConflict(ev.EventID, i)
			}
			seqs[i] = stored.Sequence
			continue
		}
		key := runKey{ev.Tenant, ev.RunID}
		n, ok := next[key]
		if !ok {
			n = int64(len(s.runs[key]))
		}
		seqs[i], next[key] = n, n+1
	}
	return seqs, nil
}

// storeEvents stores the new events of a checked batch with their
// sequences, publishes them and sets the caller's Sequence fields. The
// caller holds s.mu.
func (s *Store) storeEvents(events []*audit.Event, seqs []int64) {
	var recs []store.Record
	for i, ev := range events {
		if _, ok := s.ids[ev.EventID]; ok {
			continue
		}
		cp := *ev
		cp.Sequence = seqs[i]
		cp.Timestamp = cp.Timestamp.UTC()
		cp.Payload = bytes.Clone(ev.Payload)
		s.events = append(s.events, &cp)
		pos := int64(len(s.events))
		key := runKey{ev.Tenant, ev.RunID}
		s.ids[ev.EventID] = pos
		s.runs[key] = append(s.runs[key], pos)
		s.tenants[ev.Tenant] = append(s.tenants[ev.Tenant], pos)
		recs = append(recs, store.Record{Pos: pos, Event: cp})
	}
	for i, ev := range events {
		ev.Sequence = seqs[i]
	}
	s.feed.Publish(recs)
}

// EventsByRun implements store.Events.EventsByRun.
func (s *Store) EventsByRun(ctx context.Context, tenant, runID string, afterSeq int64, limit int) ([]audit.Event, error) {
	if err := s.readable(ctx, "events by run"); err != nil {
		return nil, err
	}
	if afterSeq < -1 {
		return nil, errcode.New(errcode.InvalidArgument, "events by run: afterSeq must be >= -1").
			WithDetails(map[string]any{"field": "afterSeq"})
	}
	limit = store.PageLimit(limit)
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx := s.runs[runKey{tenant, runID}]
	if afterSeq+1 >= int64(len(idx)) {
		return []audit.Event{}, nil
	}
	idx = idx[afterSeq+1:]
	if len(idx) > limit {
		idx = idx[:limit]
	}
	out := make([]audit.Event, len(idx))
	for i, pos := range idx {
		out[i] = copyEvent(s.events[pos-1])
	}
	return out, nil
}

// EventsByTime implements store.Events.EventsByTime. It scans the tenant's
// events: O(n log n) per call.
func (s *Store) EventsByTime(ctx context.Context, tenant string, from, to time.Time, cursor string, limit int) ([]audit.Event, string, error) {
	if err := s.readable(ctx, "events by time"); err != nil {
		return nil, "", err
	}
	c, err := store.ParseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	limit = store.PageLimit(limit)
	s.mu.RLock()
	var match []int64
	for _, pos := range s.tenants[tenant] {
		ev := s.events[pos-1]
		if (!from.IsZero() && ev.Timestamp.Before(from)) || (!to.IsZero() && !ev.Timestamp.Before(to)) {
			continue
		}
		if !c.IsStart() && cmpPos(ev.Timestamp, pos, c.Time, c.Pos) <= 0 {
			continue
		}
		match = append(match, pos)
	}
	slices.SortFunc(match, func(a, b int64) int {
		return cmpPos(s.events[a-1].Timestamp, a, s.events[b-1].Timestamp, b)
	})
	if len(match) > limit {
		match = match[:limit]
	}
	out := make([]audit.Event, len(match))
	for i, pos := range match {
		out[i] = copyEvent(s.events[pos-1])
	}
	s.mu.RUnlock()
	next := ""
	if len(match) == limit {
		last := match[len(match)-1]
		next = store.Cursor{Time: out[len(out)-1].Timestamp, Pos: last}.String()
	}
	return out, next, nil
}

// cmpPos orders (time, pos) pairs.
func cmpPos(ta time.Time, pa int64, tb time.Time, pb int64) int {
	if c := ta.Compare(tb); c != 0 {
		return c
	}
	return cmp.Compare(pa, pb)
}

// Follow implements store.Events.Follow.
func (s *Store) Follow(ctx context.Context, tenant, cursor string) (<-chan store.Followed, error) {
	if err := s.readable(ctx, "follow events"); err != nil {
		return nil, err
	}
	return s.feed.Follow(ctx, tenant, cursor)
}

// readAfter is the feed's catch-up read.
func (s *Store) readAfter(_ context.Context, tenant string, after, upto int64, limit int) ([]store.Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	all := s.tenants[tenant]
	i, _ := slices.BinarySearch(all, after+1)
	var out []store.Record
	for ; i < len(all) && all[i] <= upto && len(out) < limit; i++ {
		out = append(out, store.Record{Pos: all[i], Event: copyEvent(s.events[all[i]-1])})
	}
	return out, nil
}

// readable checks ctx and that the store is open.
func (s *Store) readable(ctx context.Context, op string) error {
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed(op)
	}
	return nil
}

// copyEvent returns a copy of *ev with its own payload bytes.
func copyEvent(ev *audit.Event) audit.Event {
	cp := *ev
	cp.Payload = bytes.Clone(ev.Payload)
	return cp
}

// ChainID implements store.Receipts.ChainID.
func (s *Store) ChainID() string { return s.signer.KeyID() }

// PublicKey implements store.Receipts.PublicKey.
func (s *Store) PublicKey() ed25519.PublicKey { return s.signer.PublicKey() }

// AppendReceipt implements store.Receipts.AppendReceipt. The covering
// checkpoint is signed when a reader asks for checkpoints.
func (s *Store) AppendReceipt(ctx context.Context, r *receipt.Receipt) error {
	if err := store.ContextError(ctx, "append receipt"); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append receipt: nil receipt")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("append receipt")
	}
	return s.chain.AppendWith(r, s.storeReceipt)
}

// storeReceipt is the commit callback of a receipt's link: it refuses a
// stored ReceiptID and keeps a copy of r. The caller holds s.mu.
func (s *Store) storeReceipt(r *receipt.Receipt) error {
	if _, dup := s.rcptIDs[r.ReceiptID]; dup {
		return errcode.Errorf(errcode.Conflict, "append receipt: receiptId %q is already stored", r.ReceiptID).
			WithDetails(map[string]any{"field": "receiptId"})
	}
	cp := copyReceipt(r)
	s.receipts = append(s.receipts, cp)
	s.rcptIDs[cp.ReceiptID] = cp
	return nil
}

// AppendOutcome implements store.Outcomes: under one lock it checks the
// events, links r and, only if r is accepted, stores both.
func (s *Store) AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error {
	if err := store.ContextError(ctx, "append outcome"); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append outcome: nil receipt")
	}
	if len(events) > 0 {
		if err := store.CheckEvents(events); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("append outcome")
	}
	seqs, err := s.checkEvents(events)
	if err != nil {
		return err
	}
	return s.chain.AppendWith(r, func(r *receipt.Receipt) error {
		if err := s.storeReceipt(r); err != nil {
			return err
		}
		s.storeEvents(events, seqs)
		return nil
	})
}

// ReceiptsByChain implements store.Receipts.ReceiptsByChain.
func (s *Store) ReceiptsByChain(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Receipt, error) {
	if err := s.readable(ctx, "receipts by chain"); err != nil {
		return nil, err
	}
	limit = store.PageLimit(limit)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if chainID != s.chain.ID() || fromSeq >= uint64(len(s.receipts)) {
		return []*receipt.Receipt{}, nil
	}
	rs := s.receipts[fromSeq:]
	if len(rs) > limit {
		rs = rs[:limit]
	}
	out := make([]*receipt.Receipt, len(rs))
	for i, r := range rs {
		out[i] = copyReceipt(r)
	}
	return out, nil
}

// ReceiptByID implements store.Receipts.ReceiptByID.
func (s *Store) ReceiptByID(ctx context.Context, tenant, receiptID string) (*receipt.Receipt, error) {
	if err := s.readable(ctx, "receipt by id"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.rcptIDs[receiptID]
	if !ok || r.Tenant != tenant {
		return nil, errcode.Errorf(errcode.NotFound, "receipt %q not found", receiptID)
	}
	return copyReceipt(r), nil
}

// Checkpoints implements store.Receipts.Checkpoints. It first signs a
// checkpoint over the chain's head if the head is not covered yet.
func (s *Store) Checkpoints(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Checkpoint, error) {
	if err := s.readable(ctx, "checkpoints"); err != nil {
		return nil, err
	}
	limit = store.PageLimit(limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if chainID != s.chain.ID() {
		return []*receipt.Checkpoint{}, nil
	}
	if cp, ok := s.chain.Checkpoint(); ok {
		s.cps = append(s.cps, cp)
	}
	i, _ := slices.BinarySearchFunc(s.cps, fromSeq, func(cp *receipt.Checkpoint, seq uint64) int { return cmp.Compare(cp.Seq, seq) })
	out := []*receipt.Checkpoint{}
	for ; i < len(s.cps) && len(out) < limit; i++ {
		cp := *s.cps[i]
		out = append(out, &cp)
	}
	return out, nil
}

// ExportReceipts implements store.Receipts.ExportReceipts (store.Export).
func (s *Store) ExportReceipts(ctx context.Context, w io.Writer, chainID string, fromSeq uint64) error {
	if err := s.readable(ctx, "export receipts"); err != nil {
		return err
	}
	return store.Export(ctx, s, w, chainID, fromSeq)
}

// copyReceipt returns a deep copy of r.
func copyReceipt(r *receipt.Receipt) *receipt.Receipt {
	cp := *r
	if r.Error != nil {
		e := *r.Error
		cp.Error = &e
	}
	if r.DurationMs != nil {
		d := *r.DurationMs
		cp.DurationMs = &d
	}
	return &cp
}

// CreateApproval implements store.Approvals.CreateApproval.
func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	if err := store.ContextError(ctx, "create approval"); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	cp := normApproval(*a)
	cp.Status = store.ApprovalPending
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("create approval")
	}
	if _, dup := s.approvals[cp.ID]; dup {
		return errcode.Errorf(errcode.Conflict, "approval %q already exists", cp.ID).WithDetails(map[string]any{"field": "id"})
	}
	s.approvals[cp.ID] = &cp
	a.Status = store.ApprovalPending
	return nil
}

// GetApproval implements store.Approvals.GetApproval.
func (s *Store) GetApproval(ctx context.Context, tenant, id string) (*store.Approval, error) {
	if err := s.readable(ctx, "get approval"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, err := s.approval(tenant, id)
	if err != nil {
		return nil, err
	}
	cp := *a
	return &cp, nil
}

// approval returns tenant's approval id or NotFound; callers hold s.mu.
func (s *Store) approval(tenant, id string) (*store.Approval, error) {
	a, ok := s.approvals[id]
	if !ok || a.Tenant != tenant {
		return nil, errcode.Errorf(errcode.NotFound, "approval %q not found", id)
	}
	return a, nil
}

// ListApprovals implements store.Approvals.ListApprovals.
func (s *Store) ListApprovals(ctx context.Context, tenant string, status store.ApprovalStatus) ([]store.Approval, error) {
	if err := s.readable(ctx, "list approvals"); err != nil {
		return nil, err
	}
	if status != "" && !status.Valid() {
		return nil, errcode.Errorf(errcode.InvalidArgument, "list approvals: unknown status %q", status).
			WithDetails(map[string]any{"field": "status"})
	}
	s.mu.RLock()
	out := []store.Approval{}
	for _, a := range s.approvals {
		if a.Tenant == tenant && (status == "" || a.Status == status) {
			out = append(out, *a)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.Approval) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ResolveApproval implements store.Approvals.ResolveApproval.
func (s *Store) ResolveApproval(ctx context.Context, tenant, id string, res store.Resolution) (*store.Approval, error) {
	return s.transition(ctx, "resolve approval", tenant, id, func(a store.Approval) (store.Approval, error) { return a.Resolve(res) })
}

// ConsumeApproval implements store.Approvals.ConsumeApproval.
func (s *Store) ConsumeApproval(ctx context.Context, tenant, id string, at time.Time) (*store.Approval, error) {
	return s.transition(ctx, "consume approval", tenant, id, func(a store.Approval) (store.Approval, error) { return a.Consume(at) })
}

// transition applies step to tenant's approval id atomically.
func (s *Store) transition(ctx context.Context, op, tenant, id string, step func(store.Approval) (store.Approval, error)) (*store.Approval, error) {
	if err := store.ContextError(ctx, op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed(op)
	}
	a, err := s.approval(tenant, id)
	if err != nil {
		return nil, err
	}
	next, err := step(*a)
	if err != nil {
		return nil, err
	}
	*a = next
	cp := next
	return &cp, nil
}

// normApproval returns a with its times in UTC.
func normApproval(a store.Approval) store.Approval {
	a.CreatedAt = a.CreatedAt.UTC()
	if !a.ExpiresAt.IsZero() {
		a.ExpiresAt = a.ExpiresAt.UTC()
	}
	if !a.ResolvedAt.IsZero() {
		a.ResolvedAt = a.ResolvedAt.UTC()
	}
	return a
}

// OpenSession implements store.Sessions.OpenSession.
func (s *Store) OpenSession(ctx context.Context, sess *store.Session) error {
	if err := store.ContextError(ctx, "open session"); err != nil {
		return err
	}
	if err := sess.Validate(); err != nil {
		return err
	}
	cp := *sess
	cp.OpenedAt = cp.OpenedAt.UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("open session")
	}
	if _, dup := s.sessions[cp.SessionID]; dup {
		return errcode.Errorf(errcode.Conflict, "session %q already exists", cp.SessionID).WithDetails(map[string]any{"field": "sessionId"})
	}
	s.sessions[cp.SessionID] = &cp
	return nil
}

// CloseSession implements store.Sessions.CloseSession.
func (s *Store) CloseSession(ctx context.Context, tenant, id, outcome string, at time.Time) (*store.Session, error) {
	if err := store.ContextError(ctx, "close session"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed("close session")
	}
	sess, err := s.session(tenant, id)
	if err != nil {
		return nil, err
	}
	next, err := sess.Close(outcome, at)
	if err != nil {
		return nil, err
	}
	*sess = next
	cp := next
	return &cp, nil
}

// GetSession implements store.Sessions.GetSession.
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*store.Session, error) {
	if err := s.readable(ctx, "get session"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(tenant, id)
	if err != nil {
		return nil, err
	}
	cp := *sess
	return &cp, nil
}

// session returns tenant's session id or NotFound; callers hold s.mu.
func (s *Store) session(tenant, id string) (*store.Session, error) {
	sess, ok := s.sessions[id]
	if !ok || sess.Tenant != tenant {
		return nil, errcode.Errorf(errcode.NotFound, "session %q not found", id)
	}
	return sess, nil
}
