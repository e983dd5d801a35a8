package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

func TestCursor(t *testing.T) {
	at := time.Date(2026, 2, 3, 4, 5, 6, 789_012_345, time.FixedZone("x", 3600))
	for _, c := range []store.Cursor{{Time: at, Pos: 1}, {Time: at, Pos: 1 << 62}, {Time: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), Pos: 7}} {
		s := c.String()
		if strings.ContainsAny(s, "+/=?&") {
			t.Errorf("cursor %q is not URL-safe", s)
		}
		got, err := store.ParseCursor(s)
		if err != nil || got.Pos != c.Pos || !got.Time.Equal(c.Time) || got.Time.Location() != time.UTC {
			t.Errorf("ParseCursor(%v.String()) = %v, %v", c, got, err)
		}
	}
	for _, s := range []string{"", store.FromStart, store.Cursor{}.String()} {
		if c, err := store.ParseCursor(s); err != nil || !c.IsStart() {
			t.Errorf("ParseCursor(%q) = %v, %v; want the start", s, c, err)
		}
	}
	for _, s := range []string{"x", "MS4xLjE", "Mi4xLjEuMQ", "MS4wLjEuMQ", "MS4xLjEuMTAwMDAwMDAwMA", strings.Repeat("A", 200)} {
		_, err := store.ParseCursor(s)
		if !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
			t.Errorf("ParseCursor(%q) = %v, want invalid_argument", s, err)
		}
	}
}

func TestPageLimit(t *testing.T) {
	for in, want := range map[int]int{-1: store.DefaultLimit, 0: store.DefaultLimit, 1: 1, 500: 500, store.MaxLimit: store.MaxLimit, store.MaxLimit + 1: store.MaxLimit} {
		if got := store.PageLimit(in); got != want {
			t.Errorf("PageLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestApprovalStateMachine(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := store.Approval{ID: "a", Principal: "p", ToolID: "native:x", ArgsHash: "h", Status: store.ApprovalPending, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	code := func(err error) errcode.Code { return errcode.CodeOf(err) }
	for _, c := range []struct {
		name string
		from store.ApprovalStatus
		res  store.Resolution
		want errcode.Code
	}{
		{"approve", store.ApprovalPending, store.Resolution{Status: store.ApprovalApproved, By: "b", At: t0}, ""},
		{"deny", store.ApprovalPending, store.Resolution{Status: store.ApprovalDenied, By: "b", At: t0}, ""},
		{"expire late", store.ApprovalPending, store.Resolution{Status: store.ApprovalExpired, By: "sweeper", At: t0.Add(2 * time.Hour)}, ""},
		{"approve late", store.ApprovalPending, store.Resolution{Status: store.ApprovalApproved, By: "b", At: t0.Add(time.Hour)}, errcode.Conflict},
		{"to pending", store.ApprovalPending, store.Resolution{Status: store.ApprovalPending, By: "b", At: t0}, errcode.InvalidArgument},
		{"no time", store.ApprovalPending, store.Resolution{Status: store.ApprovalDenied, By: "b"}, errcode.InvalidArgument},
		{"bad utf8", store.ApprovalPending, store.Resolution{Status: store.ApprovalDenied, By: "b", Reason: "\xff", At: t0}, errcode.InvalidArgument},
		{"from approved", store.ApprovalApproved, store.Resolution{Status: store.ApprovalDenied, By: "b", At: t0}, errcode.Conflict},
		{"from consumed", store.ApprovalConsumed, store.Resolution{Status: store.ApprovalApproved, By: "b", At: t0}, errcode.Conflict},
	} {
		from := a
		from.Status = c.from
		got, err := from.Resolve(c.res)
		if code(err) != c.want {
			t.Errorf("%s: Resolve error %v, want %q", c.name, err, c.want)
			continue
		}
		if err == nil && (got.Status != c.res.Status || got.ResolvedBy != c.res.By || !got.ResolvedAt.Equal(c.res.At)) {
			t.Errorf("%s: Resolve = %+v", c.name, got)
		}
		if err != nil && got != from {
			t.Errorf("%s: a refused Resolve changed the approval", c.name)
		}
	}
	approved := a
	approved.Status = store.ApprovalApproved
	if got, err := approved.Consume(t0); err != nil || got.Status != store.ApprovalConsumed {
		t.Errorf("Consume = %+v, %v", got, err)
	}
	if _, err := approved.Consume(t0.Add(time.Hour)); code(err) != errcode.Conflict {
		t.Errorf("Consume at the expiry: %v", err)
	}
	if _, err := approved.Consume(time.Time{}); code(err) != errcode.InvalidArgument {
		t.Errorf("Consume without a time: %v", err)
	}
	if _, err := a.Consume(t0); code(err) != errcode.Conflict {
		t.Errorf("Consume of a pending approval: %v", err)
	}
	noExpiry := approved
	noExpiry.ExpiresAt = time.Time{}
	if _, err := noExpiry.Consume(t0.Add(1000 * time.Hour)); err != nil {
		t.Errorf("Consume without expiry: %v", err)
	}
}

func TestSessionClose(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := store.Session{SessionID: "s", ToolID: "native:x", OpenedAt: t0}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	closed, err := s.Close("completed", t0.Add(time.Second))
	if err != nil || closed.Outcome != "completed" || !closed.ClosedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("Close = %+v, %v", closed, err)
	}
	if _, err := closed.Close("failed", t0); errcode.CodeOf(err) != errcode.Conflict {
		t.Fatalf("second Close: %v", err)
	}
	if err := closed.Validate(); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("Validate of a closed session: %v", err)
	}
	var nilSession *store.Session
	if err := nilSession.Validate(); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Fatalf("Validate(nil): %v", err)
	}
}

// fakeReceipts serves a chain held in memory, optionally with a hole.
type fakeReceipts struct {
	rs  []*receipt.Receipt
	cps []*receipt.Checkpoint
}

func (f *fakeReceipts) ReceiptsByChain(_ context.Context, _ string, from uint64, limit int) ([]*receipt.Receipt, error) {
	var out []*receipt.Receipt
	for _, r := range f.rs {
		if r.Seq >= from && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeReceipts) Checkpoints(_ context.Context, _ string, from uint64, limit int) ([]*receipt.Checkpoint, error) {
	var out []*receipt.Checkpoint
	for _, cp := range f.cps {
		if cp.Seq >= from && len(out) < limit {
			out = append(out, cp)
		}
	}
	return out, nil
}

// chain returns n linked receipts with checkpoints at the given seqs.
func chain(t *testing.T, n int, at ...int) *fakeReceipts {
	t.Helper()
	c := receipt.NewChain(receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, 32))), receipt.Options{})
	f := &fakeReceipts{}
	hash := strings.Repeat("ab", 32)
	for i := range n {
		d := int64(1)
		r := &receipt.Receipt{ReceiptID: "r" + string(rune('a'+i)), CallID: "c" + string(rune('a'+i)), RunID: "run", AgentID: "agent",
			Principal: "p", ToolID: "native:x", Transport: "native", Decision: receipt.Decision{Effect: "allow"},
			RequestedArgsHash: hash, ExecutedArgsHash: hash, Status: receipt.StatusOK, StartedAt: time.Unix(0, 0), DurationMs: &d}
		if err := c.Append(r); err != nil {
			t.Fatal(err)
		}
		f.rs = append(f.rs, r)
		for _, seq := range at {
			if seq == i {
				cp, _ := c.Checkpoint()
				f.cps = append(f.cps, cp)
			}
		}
	}
	return f
}

func TestExport(t *testing.T) {
	ctx := context.Background()
	f := chain(t, 6, 1, 4) // receipt 5 is not covered yet
	var buf bytes.Buffer
	if err := store.Export(ctx, f, &buf, "any", 0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(buf.String(), "\n"); got != 5+2 {
		t.Fatalf("export wrote %d lines, want receipts 0–4 and 2 checkpoints:\n%s", got, buf.String())
	}
	if !strings.HasSuffix(strings.TrimSpace(buf.String()), f.cps[1].Sig+`"}`) {
		t.Fatalf("the export does not end with the newest checkpoint:\n%s", buf.String())
	}
	// A hole in the stored chain is reported, not papered over.
	holed := chain(t, 6, 5)
	holed.rs = append(holed.rs[:2], holed.rs[3:]...)
	err := store.Export(ctx, holed, &bytes.Buffer{}, "any", 0)
	if errcode.CodeOf(err) != errcode.Internal {
		t.Fatalf("export of a chain with a hole: %v, want internal_error", err)
	}
	// A failing writer is audit_unavailable.
	err = store.Export(ctx, f, failWriter{}, "any", 0)
	if errcode.CodeOf(err) != errcode.AuditUnavailable {
		t.Fatalf("export to a failing writer: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
