package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// AppendRecordedCall implements store.Recordings.AppendRecordedCall, in the
// writer's transaction.
func (s *Store) AppendRecordedCall(ctx context.Context, c *store.RecordedCall) error {
	if err := c.Validate(); err != nil {
		return err
	}
	cp := *c
	cp.StartedAt = cp.StartedAt.UTC()
	err := s.runOp(ctx, "append recorded call", func(w *writer) error {
		var seq int64
		if err := w.conn.QueryRowContext(context.Background(),
			`SELECT COALESCE(MAX(seq) + 1, 0) FROM recorded_calls WHERE tenant = ? AND run_id = ?`, cp.Tenant, cp.RunID).Scan(&seq); err != nil {
			return err
		}
		cp.Seq = seq
		body, err := json.Marshal(&cp)
		if err != nil {
			return errcode.Wrap(errcode.InvalidArgument, err, "recorded call")
		}
		res, err := w.conn.ExecContext(context.Background(),
			`INSERT INTO recorded_calls (tenant, call_id, run_id, seq, started_at, body) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			cp.Tenant, cp.CallID, cp.RunID, seq, cp.StartedAt.UnixNano(), string(body))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return errcode.Errorf(errcode.Conflict, "recorded call %q already exists", cp.CallID).WithDetails(map[string]any{"field": "callId"})
		}
		return nil
	})
	if err == nil {
		c.Seq = cp.Seq
	}
	return err
}

// RecordedCall implements store.Recordings.RecordedCall.
func (s *Store) RecordedCall(ctx context.Context, tenant, callID string) (*store.RecordedCall, error) {
	const op = "recorded call"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	var body string
	err := s.rdb.QueryRowContext(ctx, `SELECT body FROM recorded_calls WHERE tenant = ? AND call_id = ?`, tenant, callID).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "recorded call %q not found", callID)
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT body FROM recorded_calls WHERE tenant = ? AND run_id = ? ORDER BY started_at, seq LIMIT ?`,
		tenant, runID, store.MaxRecordedRun)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	out := []store.RecordedCall{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, store.Unavailable(op, err)
		}
		var c store.RecordedCall
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "stored recorded call")
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	store.SortRecorded(out)
	return out, nil
}

// PruneRecordings implements store.Recordings.PruneRecordings, in the
// writer's transaction.
func (s *Store) PruneRecordings(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.runOp(ctx, "prune recordings", func(w *writer) error {
		res, err := w.conn.ExecContext(context.Background(), `DELETE FROM recorded_calls WHERE started_at < ?`, before.UnixNano())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
