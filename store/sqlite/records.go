package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// approvalCols are the columns scanApproval reads, in order.
const approvalCols = `id, tenant, principal, tool_id, args_hash, status, created_at, expires_at, resolved_by, reason, resolved_at, args_binding, args_summary, request_reason`

// scanApproval reads one row of approvalCols.
func scanApproval(sc scanner) (*store.Approval, error) {
	var (
		a                         store.Approval
		status                    string
		created, expires, resolve string
	)
	if err := sc.Scan(&a.ID, &a.Tenant, &a.Principal, &a.ToolID, &a.ArgsHash, &status, &created, &expires, &a.ResolvedBy, &a.Reason, &resolve, &a.ArgsBinding, &a.ArgsSummary, &a.RequestReason); err != nil {
		return nil, err
	}
	a.Status = store.ApprovalStatus(status)
	var err error
	if a.CreatedAt, err = parseTime(created); err != nil {
		return nil, err
	}
	if a.ExpiresAt, err = parseTime(expires); err != nil {
		return nil, err
	}
	if a.ResolvedAt, err = parseTime(resolve); err != nil {
		return nil, err
	}
	return &a, nil
}

// sessionCols are the columns scanSession reads, in order.
const sessionCols = `session_id, tenant, run_id, tool_id, server, opened_at, closed_at, outcome`

// scanSession reads one row of sessionCols.
func scanSession(sc scanner) (*store.Session, error) {
	var (
		s              store.Session
		opened, closed string
	)
	if err := sc.Scan(&s.SessionID, &s.Tenant, &s.RunID, &s.ToolID, &s.Server, &opened, &closed, &s.Outcome); err != nil {
		return nil, err
	}
	var err error
	if s.OpenedAt, err = parseTime(opened); err != nil {
		return nil, err
	}
	if s.ClosedAt, err = parseTime(closed); err != nil {
		return nil, err
	}
	return &s, nil
}

// runOp runs fn in the writer's transaction and waits for the commit.
// fn returns an *errcode.Error for a failure of this operation alone; any
// other error fails the whole batch (AuditUnavailable).
func (s *Store) runOp(ctx context.Context, op string, fn func(w *writer) error) error {
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	r := requestPool.Get().(*request)
	r.kind, r.ctx, r.op = kindOp, ctx, fn
	err := s.w.submit(op, r)
	s.release(r)
	return err
}

// CreateApproval implements store.Approvals.CreateApproval.
func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	if err := a.Validate(); err != nil {
		return err
	}
	cp := *a
	err := s.runOp(ctx, "create approval", func(w *writer) error {
		res, err := w.st.insertApproval.Exec(cp.ID, cp.Tenant, cp.Principal, cp.ToolID, cp.ArgsHash, string(store.ApprovalPending),
			fmtTime(cp.CreatedAt), fmtTime(cp.ExpiresAt), "", "", "", cp.ArgsBinding, cp.ArgsSummary, cp.RequestReason)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return errcode.Errorf(errcode.Conflict, "approval %q already exists", cp.ID).WithDetails(map[string]any{"field": "id"})
		}
		return nil
	})
	if err == nil {
		a.Status = store.ApprovalPending
	}
	return err
}

// GetApproval implements store.Approvals.GetApproval.
func (s *Store) GetApproval(ctx context.Context, tenant, id string) (*store.Approval, error) {
	const op = "get approval"
	if err := s.open(ctx, op); err != nil {
		return nil, err
	}
	a, err := scanApproval(s.rdb.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && a.Tenant != tenant) {
		return nil, errcode.Errorf(errcode.NotFound, "approval %q not found", id)
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	return a, nil
}

// ListApprovals implements store.Approvals.ListApprovals.
func (s *Store) ListApprovals(ctx context.Context, tenant string, status store.ApprovalStatus) ([]store.Approval, error) {
	const op = "list approvals"
	if err := s.open(ctx, op); err != nil {
		return nil, err
	}
	if status != "" && !status.Valid() {
		return nil, errcode.Errorf(errcode.InvalidArgument, "list approvals: unknown status %q", status).
			WithDetails(map[string]any{"field": "status"})
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+approvalCols+` FROM approvals
		WHERE tenant = ? AND (? = '' OR status = ?) ORDER BY created_at, id`, tenant, string(status), string(status))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	out := []store.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, store.Unavailable(op, err)
		}
		out = append(out, *a)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
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

// transition reads tenant's approval id, applies step and writes the
// result, all in the writer's transaction: the single writer serialises
// transitions, so a consume succeeds exactly once.
func (s *Store) transition(ctx context.Context, op, tenant, id string, step func(store.Approval) (store.Approval, error)) (*store.Approval, error) {
	var out store.Approval
	err := s.runOp(ctx, op, func(w *writer) error {
		a, err := scanApproval(w.st.findApproval.QueryRow(id))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && a.Tenant != tenant) {
			return errcode.Errorf(errcode.NotFound, "approval %q not found", id)
		}
		if err != nil {
			return err
		}
		next, err := step(*a)
		if err != nil {
			return err
		}
		if _, err := w.st.updateApproval.Exec(string(next.Status), next.ResolvedBy, next.Reason, fmtTime(next.ResolvedAt), id); err != nil {
			return err
		}
		out = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// OpenSession implements store.Sessions.OpenSession.
func (s *Store) OpenSession(ctx context.Context, sess *store.Session) error {
	if err := sess.Validate(); err != nil {
		return err
	}
	cp := *sess
	return s.runOp(ctx, "open session", func(w *writer) error {
		res, err := w.st.insertSession.Exec(cp.SessionID, cp.Tenant, cp.RunID, cp.ToolID, cp.Server, fmtTime(cp.OpenedAt), "", "")
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return errcode.Errorf(errcode.Conflict, "session %q already exists", cp.SessionID).WithDetails(map[string]any{"field": "sessionId"})
		}
		return nil
	})
}

// CloseSession implements store.Sessions.CloseSession.
func (s *Store) CloseSession(ctx context.Context, tenant, id, outcome string, at time.Time) (*store.Session, error) {
	var out store.Session
	err := s.runOp(ctx, "close session", func(w *writer) error {
		sess, err := scanSession(w.st.findSession.QueryRow(id))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && sess.Tenant != tenant) {
			return errcode.Errorf(errcode.NotFound, "session %q not found", id)
		}
		if err != nil {
			return err
		}
		next, err := sess.Close(outcome, at)
		if err != nil {
			return err
		}
		if _, err := w.st.closeSes.Exec(fmtTime(next.ClosedAt), next.Outcome, id); err != nil {
			return err
		}
		out = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSession implements store.Sessions.GetSession.
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*store.Session, error) {
	const op = "get session"
	if err := s.open(ctx, op); err != nil {
		return nil, err
	}
	sess, err := scanSession(s.rdb.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE session_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && sess.Tenant != tenant) {
		return nil, errcode.Errorf(errcode.NotFound, "session %q not found", id)
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	return sess, nil
}
