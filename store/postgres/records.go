package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// beginWrite checks the store is writable (writable) and begins a
// transaction; the caller rolls it back (deferred) or commits it. Errors:
// writable's; AuditUnavailable when the transaction cannot begin.
func (s *Store) beginWrite(ctx context.Context, op string) (pgx.Tx, error) {
	if err := s.writable(ctx, op); err != nil {
		return nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	return tx, nil
}

// writable checks ctx, that the store is open and that it holds its chain
// lock (a Store that lost it writes nothing: chainGuard), for the writes
// that do not go through the writer (approvals, sessions).
func (s *Store) writable(ctx context.Context, op string) error {
	if err := s.readable(ctx, op); err != nil {
		return err
	}
	return s.guard.lostErr()
}

// isUnique reports whether err is a unique violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

const approvalCols = `id, tenant, principal, tool_id, args_hash, args_binding, args_summary, status, created_at, expires_at, resolved_by, reason, resolved_at, request_reason`

// scanApproval reads one approvals row (approvalCols).
func scanApproval(row pgx.Row) (*store.Approval, error) {
	var (
		a                   store.Approval
		status              string
		created, exp, resAt string
	)
	if err := row.Scan(&a.ID, &a.Tenant, &a.Principal, &a.ToolID, &a.ArgsHash, &a.ArgsBinding, &a.ArgsSummary, &status,
		&created, &exp, &a.ResolvedBy, &a.Reason, &resAt, &a.RequestReason); err != nil {
		return nil, err
	}
	a.Status = store.ApprovalStatus(status)
	var err error
	if a.CreatedAt, err = parseTime(created); err == nil {
		if a.ExpiresAt, err = parseTime(exp); err == nil {
			a.ResolvedAt, err = parseTime(resAt)
		}
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "stored approval")
	}
	return &a, nil
}

// CreateApproval implements store.Approvals.CreateApproval.
func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	const op = "create approval"
	if err := s.writable(ctx, op); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO approvals (`+approvalCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, '', '', '', $11)`,
		a.ID, a.Tenant, a.Principal, a.ToolID, a.ArgsHash, a.ArgsBinding, a.ArgsSummary, string(store.ApprovalPending),
		fmtTime(a.CreatedAt), fmtTime(a.ExpiresAt), a.RequestReason)
	if isUnique(err) {
		return errcode.Errorf(errcode.Conflict, "approval %q already exists", a.ID).WithDetails(map[string]any{"field": "id"})
	}
	if err != nil {
		return unavailableOrInvalid(op, err)
	}
	a.Status = store.ApprovalPending
	return nil
}

// GetApproval implements store.Approvals.GetApproval.
func (s *Store) GetApproval(ctx context.Context, tenant, id string) (*store.Approval, error) {
	const op = "get approval"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 AND tenant = $2`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "approval %q not found", id)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	return a, nil
}

// ListApprovals implements store.Approvals.ListApprovals.
func (s *Store) ListApprovals(ctx context.Context, tenant string, status store.ApprovalStatus) ([]store.Approval, error) {
	const op = "list approvals"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	if status != "" && !status.Valid() {
		return nil, errcode.Errorf(errcode.InvalidArgument, "list approvals: unknown status %q", status).
			WithDetails(map[string]any{"field": "status"})
	}
	rows, err := s.pool.Query(ctx, `SELECT `+approvalCols+` FROM approvals WHERE tenant = $1 AND ($2 = '' OR status = $2) ORDER BY created_at, id`,
		tenant, string(status))
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
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

// ResolveApproval implements store.Approvals.ResolveApproval. The
// transaction notifies every Store sharing the schema, on commit, so that
// calls waiting for the approval on any replica (WatchApproval) wake at
// once.
func (s *Store) ResolveApproval(ctx context.Context, tenant, id string, res store.Resolution) (*store.Approval, error) {
	const op = "resolve approval"
	tx, err := s.beginWrite(ctx, op)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The row lock serialises concurrent resolutions of any replica.
	a, err := scanApproval(tx.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 AND tenant = $2 FOR UPDATE`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "approval %q not found", id)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	next, err := a.Resolve(res)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `WITH u AS (UPDATE approvals SET status = $1, resolved_by = $2, reason = $3, resolved_at = $4 WHERE id = $5 RETURNING id)
		SELECT pg_notify($6, id) FROM u`,
		string(next.Status), next.ResolvedBy, next.Reason, fmtTime(next.ResolvedAt), id, s.lis.approvals); err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return &next, nil
}

// ConsumeApproval implements store.Approvals.ConsumeApproval with one
// conditional update (status approved and unexpired at at, to consumed):
// exactly one caller, of any replica, succeeds; the others get Conflict
// with details.status "consumed" (or what the approval is now).
func (s *Store) ConsumeApproval(ctx context.Context, tenant, id string, at time.Time) (*store.Approval, error) {
	const op = "consume approval"
	if err := s.writable(ctx, op); err != nil {
		return nil, err
	}
	if at.IsZero() {
		_, err := store.Approval{ID: id, Status: store.ApprovalApproved}.Consume(at)
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		a, err := scanApproval(s.pool.QueryRow(ctx, `UPDATE approvals SET status = $1
			WHERE id = $2 AND tenant = $3 AND status = $4 AND (expires_at = '' OR expires_at COLLATE "C" > $5)
			RETURNING `+approvalCols, string(store.ApprovalConsumed), id, tenant, string(store.ApprovalApproved), fmtTime(at)))
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, unavailableOrInvalid(op, err)
		}
		// Not consumed: say why, from the current state.
		cur, err := s.GetApproval(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if _, err := cur.Consume(at); err != nil {
			return nil, err
		}
		// It was approved after the update looked (pending then): try
		// again. An approval is approved once, so this happens at most once.
		if attempt == 2 {
			return nil, errcode.Errorf(errcode.Conflict, "approval %q could not be consumed", id).
				WithDetails(map[string]any{"status": string(cur.Status)})
		}
	}
}

const sessionCols = `session_id, tenant, run_id, tool_id, server, opened_at, closed_at, outcome`

// scanSession reads one sessions row (sessionCols).
func scanSession(row pgx.Row) (*store.Session, error) {
	var (
		ss             store.Session
		opened, closed string
	)
	if err := row.Scan(&ss.SessionID, &ss.Tenant, &ss.RunID, &ss.ToolID, &ss.Server, &opened, &closed, &ss.Outcome); err != nil {
		return nil, err
	}
	var err error
	if ss.OpenedAt, err = parseTime(opened); err == nil {
		ss.ClosedAt, err = parseTime(closed)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "stored session")
	}
	return &ss, nil
}

// OpenSession implements store.Sessions.OpenSession.
func (s *Store) OpenSession(ctx context.Context, sess *store.Session) error {
	const op = "open session"
	if err := s.writable(ctx, op); err != nil {
		return err
	}
	if err := sess.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO sessions (`+sessionCols+`) VALUES ($1, $2, $3, $4, $5, $6, '', '')`,
		sess.SessionID, sess.Tenant, sess.RunID, sess.ToolID, sess.Server, fmtTime(sess.OpenedAt))
	if isUnique(err) {
		return errcode.Errorf(errcode.Conflict, "session %q already exists", sess.SessionID).WithDetails(map[string]any{"field": "sessionId"})
	}
	if err != nil {
		return unavailableOrInvalid(op, err)
	}
	return nil
}

// CloseSession implements store.Sessions.CloseSession.
func (s *Store) CloseSession(ctx context.Context, tenant, id, outcome string, at time.Time) (*store.Session, error) {
	const op = "close session"
	tx, err := s.beginWrite(ctx, op)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	sess, err := scanSession(tx.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE session_id = $1 AND tenant = $2 FOR UPDATE`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "session %q not found", id)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	next, err := sess.Close(outcome, at)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET closed_at = $1, outcome = $2 WHERE session_id = $3`, fmtTime(next.ClosedAt), next.Outcome, id); err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return &next, nil
}

// GetSession implements store.Sessions.GetSession.
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*store.Session, error) {
	const op = "get session"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE session_id = $1 AND tenant = $2`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "session %q not found", id)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	return sess, nil
}
