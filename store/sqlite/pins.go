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

// ListPins implements store.Pins.ListPins.
func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	const op = "list pins"
	if err := s.open(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT body FROM tool_pins ORDER BY tool_id`)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	out := []store.Pin{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, store.Unavailable(op, err)
		}
		p, err := decodePin(op, body)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return out, nil
}

// GetPin implements store.Pins.GetPin.
func (s *Store) GetPin(ctx context.Context, toolID string) (*store.Pin, error) {
	const op = "get pin"
	if err := s.open(ctx, op); err != nil {
		return nil, err
	}
	return scanPin(s.rdb.QueryRowContext(ctx, `SELECT body FROM tool_pins WHERE tool_id = ?`, toolID), op, toolID)
}

func scanPin(row *sql.Row, op, toolID string) (*store.Pin, error) {
	var body string
	err := row.Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "no pin for tool %q", toolID)
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	p, err := decodePin(op, body)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func decodePin(op, body string) (store.Pin, error) {
	var p store.Pin
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return store.Pin{}, store.Unavailable(op+": stored pin", err)
	}
	return store.ClonePin(p), nil
}

// putPin writes p in the writer's transaction.
func putPin(w *writer, p store.Pin) error {
	body, err := store.MarshalPin(p)
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "put pin")
	}
	_, err = w.conn.ExecContext(context.Background(), `INSERT INTO tool_pins (tool_id, server, body, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (tool_id) DO UPDATE SET server = excluded.server, body = excluded.body, updated_at = excluded.updated_at`,
		p.ToolID, p.Server, string(body), fmtTime(time.Now()))
	return err
}

// PutPin implements store.Pins.PutPin.
func (s *Store) PutPin(ctx context.Context, p *store.Pin) error {
	if err := p.Validate(); err != nil {
		return err
	}
	cp := store.ClonePin(*p)
	return s.runOp(ctx, "put pin", func(w *writer) error { return putPin(w, cp) })
}

// ApprovePin implements store.Pins.ApprovePin (read and write in the
// writer's one transaction).
func (s *Store) ApprovePin(ctx context.Context, toolID, digest, by string, at time.Time) (*store.Pin, error) {
	const op = "approve pin"
	var out store.Pin
	err := s.runOp(ctx, op, func(w *writer) error {
		p, err := scanPin(w.conn.QueryRowContext(context.Background(), `SELECT body FROM tool_pins WHERE tool_id = ?`, toolID), op, toolID)
		if err != nil {
			var ee *errcode.Error
			if errors.As(err, &ee) && ee.Code == errcode.NotFound {
				return ee
			}
			return err
		}
		next, err := p.Approve(digest, by, at)
		if err != nil {
			return err
		}
		out = next
		return putPin(w, next)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}
