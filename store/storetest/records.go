package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// newApproval returns a valid new approval of tenant, created at t0 and
// expiring an hour later.
func newApproval(tenant, id string) *store.Approval {
	return &store.Approval{
		ID: id, Tenant: tenant, Principal: "alice", ToolID: "mcp:fs.write_file", ArgsHash: sha("args " + id),
		ArgsSummary: `{"content":"[redacted]","path":"/tmp/` + id + `","note":"…"}`,
		CreatedAt:   t0, ExpiresAt: t0.Add(time.Hour),
	}
}

// sameApproval fails unless got equals want (times compared with Equal).
func sameApproval(t testing.TB, got *store.Approval, want store.Approval) {
	t.Helper()
	g := *got
	if g.CreatedAt.Location() != time.UTC {
		t.Fatalf("approval %s: times are not in UTC", g.ID)
	}
	for _, tm := range []*time.Time{&g.CreatedAt, &g.ExpiresAt, &g.ResolvedAt, &want.CreatedAt, &want.ExpiresAt, &want.ResolvedAt} {
		*tm = tm.UTC()
	}
	if g != want {
		t.Fatalf("approval mismatch:\n got  %+v\n want %+v", g, want)
	}
}

func testApprovals(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := newApproval("acme", "appr_1")
	if err := s.CreateApproval(ctx, a); err != nil {
		t.Fatalf("CreateApproval: %v", err)
	}
	want := *a
	want.Status = store.ApprovalPending
	got, err := s.GetApproval(ctx, "acme", "appr_1")
	if err != nil {
		t.Fatalf("GetApproval: %v", err)
	}
	sameApproval(t, got, want)
	_, err = s.GetApproval(ctx, "globex", "appr_1")
	wantCode(t, err, errcode.NotFound, "GetApproval of another tenant's approval")
	_, err = s.GetApproval(ctx, "acme", "appr_none")
	wantCode(t, err, errcode.NotFound, "GetApproval of an unknown approval")
	wantCode(t, s.CreateApproval(ctx, newApproval("globex", "appr_1")), errcode.Conflict, "duplicate approval id")
	bad := newApproval("acme", "appr_bad")
	bad.ArgsHash = ""
	wantCode(t, s.CreateApproval(ctx, bad), errcode.InvalidArgument, "approval without argsHash")
	bad = newApproval("acme", "appr_bad")
	bad.Status = store.ApprovalApproved
	wantCode(t, s.CreateApproval(ctx, bad), errcode.InvalidArgument, "approval created approved")
	bad = newApproval("acme", "appr_bad")
	bad.ExpiresAt = t0
	wantCode(t, s.CreateApproval(ctx, bad), errcode.InvalidArgument, "approval expiring at creation")

	// More approvals, for listing: created out of order.
	for i, id := range []string{"appr_4", "appr_2", "appr_3"} {
		b := newApproval("acme", id)
		b.CreatedAt = t0.Add(time.Duration(3-i) * time.Minute)
		if err := s.CreateApproval(ctx, b); err != nil {
			t.Fatalf("CreateApproval(%s): %v", id, err)
		}
	}
	if err := s.CreateApproval(ctx, newApproval("globex", "appr_g")); err != nil {
		t.Fatalf("CreateApproval: %v", err)
	}
	list := func(tenant string, status store.ApprovalStatus) []string {
		t.Helper()
		as, err := s.ListApprovals(ctx, tenant, status)
		if err != nil {
			t.Fatalf("ListApprovals(%q, %q): %v", tenant, status, err)
		}
		ids := []string{}
		for _, a := range as {
			ids = append(ids, a.ID)
		}
		return ids
	}
	if got := fmt.Sprint(list("acme", store.ApprovalPending)); got != "[appr_1 appr_3 appr_2 appr_4]" {
		t.Fatalf("pending acme approvals = %s", got)
	}

	// pending → approved → consumed.
	at := t0.Add(time.Minute)
	res, err := s.ResolveApproval(ctx, "acme", "appr_1", store.Resolution{Status: store.ApprovalApproved, By: "bob", Reason: "looks fine", At: at})
	if err != nil {
		t.Fatalf("ResolveApproval: %v", err)
	}
	want.Status, want.ResolvedBy, want.Reason, want.ResolvedAt = store.ApprovalApproved, "bob", "looks fine", at
	sameApproval(t, res, want)
	got, _ = s.GetApproval(ctx, "acme", "appr_1")
	sameApproval(t, got, want)
	_, err = s.ResolveApproval(ctx, "acme", "appr_1", store.Resolution{Status: store.ApprovalDenied, By: "carol", At: at})
	wantCode(t, err, errcode.Conflict, "resolving an approved approval")
	if st := errcode.As(err).Details["status"]; st != "approved" {
		t.Errorf("conflict details.status = %v, want approved", st)
	}
	_, err = s.ResolveApproval(ctx, "globex", "appr_1", store.Resolution{Status: store.ApprovalDenied, By: "carol", At: at})
	wantCode(t, err, errcode.NotFound, "resolving another tenant's approval")
	_, err = s.ResolveApproval(ctx, "acme", "appr_2", store.Resolution{Status: store.ApprovalConsumed, By: "carol", At: at})
	wantCode(t, err, errcode.InvalidArgument, "resolving to consumed")
	_, err = s.ResolveApproval(ctx, "acme", "appr_2", store.Resolution{Status: store.ApprovalApproved, At: at})
	wantCode(t, err, errcode.InvalidArgument, "resolving without an approver")
	_, err = s.ConsumeApproval(ctx, "globex", "appr_1", at)
	wantCode(t, err, errcode.NotFound, "consuming another tenant's approval")
	c, err := s.ConsumeApproval(ctx, "acme", "appr_1", at)
	if err != nil || c.Status != store.ApprovalConsumed {
		t.Fatalf("ConsumeApproval = %+v, %v", c, err)
	}
	_, err = s.ConsumeApproval(ctx, "acme", "appr_1", at)
	wantCode(t, err, errcode.Conflict, "consuming twice")

	// pending → denied; a denied or pending approval cannot be consumed.
	_, err = s.ConsumeApproval(ctx, "acme", "appr_2", at)
	wantCode(t, err, errcode.Conflict, "consuming a pending approval")
	if _, err := s.ResolveApproval(ctx, "acme", "appr_2", store.Resolution{Status: store.ApprovalDenied, By: "bob", At: at}); err != nil {
		t.Fatalf("deny: %v", err)
	}
	_, err = s.ConsumeApproval(ctx, "acme", "appr_2", at)
	wantCode(t, err, errcode.Conflict, "consuming a denied approval")

	if got := fmt.Sprint(list("acme", store.ApprovalPending)); got != "[appr_3 appr_4]" {
		t.Fatalf("pending acme approvals = %s", got)
	}
	if got := fmt.Sprint(list("acme", store.ApprovalConsumed)); got != "[appr_1]" {
		t.Fatalf("consumed acme approvals = %s", got)
	}
	if got := fmt.Sprint(list("acme", "")); got != "[appr_1 appr_3 appr_2 appr_4]" {
		t.Fatalf("all acme approvals = %s", got)
	}
	if got := fmt.Sprint(list("globex", "")); got != "[appr_g]" {
		t.Fatalf("all globex approvals = %s", got)
	}
	if got := fmt.Sprint(list("initech", "")); got != "[]" {
		t.Fatalf("all initech approvals = %s", got)
	}
	_, err = s.ListApprovals(ctx, "acme", "bogus")
	wantCode(t, err, errcode.InvalidArgument, "listing an unknown status")
}

func testApprovalExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"appr_late", "appr_exp", "appr_ok"} {
		if err := s.CreateApproval(ctx, newApproval("acme", id)); err != nil {
			t.Fatalf("CreateApproval: %v", err)
		}
	}
	expiry := t0.Add(time.Hour)
	_, err := s.ResolveApproval(ctx, "acme", "appr_late", store.Resolution{Status: store.ApprovalApproved, By: "bob", At: expiry})
	wantCode(t, err, errcode.Conflict, "approving at the expiry")
	if r := errcode.As(err).Details["reason"]; r != "expired" {
		t.Errorf("conflict details.reason = %v, want expired", r)
	}
	got, err := s.ResolveApproval(ctx, "acme", "appr_late", store.Resolution{Status: store.ApprovalExpired, By: "sweeper", At: expiry})
	if err != nil || got.Status != store.ApprovalExpired {
		t.Fatalf("expiring: %+v, %v", got, err)
	}
	// Approved in time, consumed too late.
	if _, err := s.ResolveApproval(ctx, "acme", "appr_exp", store.Resolution{Status: store.ApprovalApproved, By: "bob", At: t0}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	_, err = s.ConsumeApproval(ctx, "acme", "appr_exp", expiry.Add(time.Nanosecond))
	wantCode(t, err, errcode.Conflict, "consuming after the expiry")
	if g, _ := s.GetApproval(ctx, "acme", "appr_exp"); g.Status != store.ApprovalApproved {
		t.Fatalf("a refused consume changed the status to %s", g.Status)
	}
	if _, err := s.ResolveApproval(ctx, "acme", "appr_ok", store.Resolution{Status: store.ApprovalApproved, By: "bob", At: t0}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if _, err := s.ConsumeApproval(ctx, "acme", "appr_ok", expiry.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("consuming just before the expiry: %v", err)
	}
}

func testApprovalConsumeOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	const rounds, racers = 5, 16
	for round := range rounds {
		id := fmt.Sprintf("appr_race_%d", round)
		if err := s.CreateApproval(ctx, newApproval("acme", id)); err != nil {
			t.Fatalf("CreateApproval: %v", err)
		}
		if _, err := s.ResolveApproval(ctx, "acme", id, store.Resolution{Status: store.ApprovalApproved, By: "bob", At: t0}); err != nil {
			t.Fatalf("approve: %v", err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, conflicts := 0, 0
		start := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-start
				_, err := s.ConsumeApproval(ctx, "acme", id, t0.Add(time.Minute))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, &errcode.Error{Code: errcode.Conflict}):
					conflicts++
				default:
					t.Errorf("ConsumeApproval: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins != 1 || conflicts != racers-1 {
			t.Fatalf("round %d: %d consumers won, %d got Conflict; want exactly 1 and %d", round, wins, conflicts, racers-1)
		}
	}
}

func testSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	sess := &store.Session{SessionID: "sess_1", Tenant: "acme", RunID: "run_1", ToolID: "mcp:db.query", Server: "db", OpenedAt: t0}
	if err := s.OpenSession(ctx, sess); err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	got, err := s.GetSession(ctx, "acme", "sess_1")
	if err != nil || *got != *sess {
		t.Fatalf("GetSession = %+v, %v; want %+v", got, err, sess)
	}
	_, err = s.GetSession(ctx, "globex", "sess_1")
	wantCode(t, err, errcode.NotFound, "GetSession of another tenant's session")
	_, err = s.GetSession(ctx, "acme", "sess_none")
	wantCode(t, err, errcode.NotFound, "GetSession of an unknown session")
	dup := *sess
	dup.Tenant = "globex"
	wantCode(t, s.OpenSession(ctx, &dup), errcode.Conflict, "duplicate session id")
	bad := *sess
	bad.SessionID, bad.ToolID = "sess_bad", ""
	wantCode(t, s.OpenSession(ctx, &bad), errcode.InvalidArgument, "session without toolId")
	bad = *sess
	bad.SessionID, bad.Outcome, bad.ClosedAt = "sess_bad", audit.SessionCompleted, t0
	wantCode(t, s.OpenSession(ctx, &bad), errcode.InvalidArgument, "session opened closed")

	_, err = s.CloseSession(ctx, "globex", "sess_1", audit.SessionCompleted, t0.Add(time.Second))
	wantCode(t, err, errcode.NotFound, "closing another tenant's session")
	_, err = s.CloseSession(ctx, "acme", "sess_1", "", t0.Add(time.Second))
	wantCode(t, err, errcode.InvalidArgument, "closing without an outcome")
	closed, err := s.CloseSession(ctx, "acme", "sess_1", audit.SessionFailed, t0.Add(time.Second))
	if err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	want := *sess
	want.ClosedAt, want.Outcome = t0.Add(time.Second), audit.SessionFailed
	if *closed != want {
		t.Fatalf("CloseSession = %+v, want %+v", closed, want)
	}
	if got, _ := s.GetSession(ctx, "acme", "sess_1"); *got != want {
		t.Fatalf("GetSession after close = %+v, want %+v", got, want)
	}
	_, err = s.CloseSession(ctx, "acme", "sess_1", audit.SessionCompleted, t0.Add(2*time.Second))
	wantCode(t, err, errcode.Conflict, "closing twice")
	// A minimal session: optional fields empty.
	min := &store.Session{SessionID: "sess_2", ToolID: "native:clock", OpenedAt: t0}
	if err := s.OpenSession(ctx, min); err != nil {
		t.Fatalf("OpenSession(minimal): %v", err)
	}
	if got, err := s.GetSession(ctx, "", "sess_2"); err != nil || *got != *min {
		t.Fatalf("GetSession(minimal) = %+v, %v", got, err)
	}
}

func testAdapters(t *testing.T, s store.Store) {
	ctx := context.Background()
	log := store.EventLog(s)
	e1, e2 := newEvent(t, "acme", "run_ad", 1, t0), newEvent(t, "acme", "run_ad", 2, t0)
	if err := log.Append(ctx, e1, e2); err != nil || e1.Sequence != 0 || e2.Sequence != 1 {
		t.Fatalf("EventLog.Append: %v (seqs %d, %d)", err, e1.Sequence, e2.Sequence)
	}
	if got := allByRun(t, s, "acme", "run_ad"); len(got) != 2 {
		t.Fatalf("EventLog stored %d events", len(got))
	}
	rl := store.ReceiptLog(s)
	r := newReceipt("acme", "ad")
	if err := rl.Append(ctx, r); err != nil || r.Hash == "" {
		t.Fatalf("ReceiptLog.Append: %v (hash %q)", err, r.Hash)
	}
	if got, err := s.ReceiptByID(ctx, "acme", r.ReceiptID); err != nil || got.Hash != r.Hash {
		t.Fatalf("ReceiptByID after ReceiptLog.Append: %v", err)
	}
}

func testClose(t *testing.T, s store.Store) {
	ctx := deadline(t)
	ch, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	mustAppend(t, s, newEvent(t, "acme", "run_c", 0, t0))
	mustAppendReceipt(t, s, newReceipt("acme", "c"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, ch)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantCode(t, s.AppendEvents(ctx, newEvent(t, "acme", "run_c", 1, t0)), errcode.AuditUnavailable, "AppendEvents after Close")
	wantCode(t, s.AppendReceipt(ctx, newReceipt("acme", "d")), errcode.AuditUnavailable, "AppendReceipt after Close")
	wantCode(t, s.CreateApproval(ctx, newApproval("acme", "appr_c")), errcode.AuditUnavailable, "CreateApproval after Close")
	_, err = s.Follow(ctx, "acme", "")
	wantCode(t, err, errcode.AuditUnavailable, "Follow after Close")
	_, err = s.EventsByRun(ctx, "acme", "run_c", -1, 10)
	wantCode(t, err, errcode.AuditUnavailable, "EventsByRun after Close")
}
