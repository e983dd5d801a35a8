package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// AppendRecordedCall implements store.Recordings.AppendRecordedCall. The
// seq is taken in the insert itself; two calls of one run appended at the
// same instant may share a seq (it only breaks ties of StartedAt).
func (s *Store) AppendRecordedCall(ctx context.Context, c *store.RecordedCall) error {
	const op = "append recorded call"
	if err := s.writable(ctx, op); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	cp := *c
	cp.StartedAt = cp.StartedAt.UTC()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Unavailable(op, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq) + 1, 0) FROM recorded_calls WHERE tenant = $1 AND run_id = $2`,
		cp.Tenant, cp.RunID).Scan(&cp.Seq); err != nil {
		return unavailableOrInvalid(op, err)
	}
	body, err := json.Marshal(&cp)
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "recorded call")
	}
	_, err = tx.Exec(ctx, `INSERT INTO recorded_calls (tenant, call_id, run_id, seq, started_at, body) VALUES ($1, $2, $3, $4, $5, $6)`,
		cp.Tenant, cp.CallID, cp.RunID, cp.Seq, cp.StartedAt.UnixNano(), string(body))
	if isUnique(err) {
		return errcode.Errorf(errcode.Conflict, "recorded call %q already exists", cp.CallID).WithDetails(map[string]any{"field": "callId"})
	}
	if err != nil {
		return unavailableOrInvalid(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Unavailable(op, err)
	}
	c.Seq = cp.Seq
	return nil
}

// RecordedCall implements store.Recordings.RecordedCall.
func (s *Store) RecordedCall(ctx context.Context, tenant, callID string) (*store.RecordedCall, error) {
	const op = "recorded call"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	var body string
	err := s.pool.QueryRow(ctx, `SELECT body FROM recorded_calls WHERE tenant = $1 AND call_id = $2`, tenant, callID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "recorded call %q not found", callID)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	var c store.RecordedCall
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "stored recorded call")
	}
	return &c, nil
}

// RecordedRun implements store.Recordings.RecordedRun.
func (s *Store) RecordedRun(ctx context.Context, tenant, runID string) ([]store.RecordedCall, error) {
	const op = "recorded run"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT body FROM recorded_calls WHERE tenant = $1 AND run_id = $2 ORDER BY started_at, seq LIMIT $3`,
		tenant, runID, store.MaxRecordedRun)
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	defer rows.Close()
	out := []store.RecordedCall{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, unavailableOrInvalid(op, err)
		}
		var c store.RecordedCall
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "stored recorded call")
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	store.SortRecorded(out)
	return out, nil
}

// PruneRecordings implements store.Recordings.PruneRecordings.
func (s *Store) PruneRecordings(ctx context.Context, before time.Time) (int64, error) {
	const op = "prune recordings"
	if err := s.writable(ctx, op); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM recorded_calls WHERE started_at < $1`, before.UnixNano())
	if err != nil {
		return 0, unavailableOrInvalid(op, err)
	}
	return tag.RowsAffected(), nil
}
