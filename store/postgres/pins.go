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

// ListPins implements store.Pins.ListPins.
func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	const op = "list pins"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT body FROM tool_pins ORDER BY tool_id`)
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	defer rows.Close()
	out := []store.Pin{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, unavailableOrInvalid(op, err)
		}
		p, err := decodePin(op, []byte(body))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	return out, nil
}

// GetPin implements store.Pins.GetPin.
func (s *Store) GetPin(ctx context.Context, toolID string) (*store.Pin, error) {
	const op = "get pin"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	return s.getPin(ctx, s.pool.QueryRow(ctx, `SELECT body FROM tool_pins WHERE tool_id = $1`, toolID), op, toolID)
}

func (s *Store) getPin(_ context.Context, row pgx.Row, op, toolID string) (*store.Pin, error) {
	var body string
	err := row.Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errcode.Errorf(errcode.NotFound, "no pin for tool %q", toolID)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	p, err := decodePin(op, []byte(body))
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func decodePin(op string, body []byte) (store.Pin, error) {
	var p store.Pin
	if err := json.Unmarshal(body, &p); err != nil {
		return store.Pin{}, store.Unavailable(op+": stored pin", err)
	}
	return store.ClonePin(p), nil
}

// PutPin implements store.Pins.PutPin.
func (s *Store) PutPin(ctx context.Context, p *store.Pin) error {
	const op = "put pin"
	if err := s.writable(ctx, op); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	body, err := store.MarshalPin(*p)
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, op)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO tool_pins (tool_id, server, body, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tool_id) DO UPDATE SET server = EXCLUDED.server, body = EXCLUDED.body, updated_at = EXCLUDED.updated_at`,
		p.ToolID, p.Server, string(body), time.Now().UTC())
	if err != nil {
		return unavailableOrInvalid(op, err)
	}
	return nil
}

// ApprovePin implements store.Pins.ApprovePin (in one transaction, the row
// locked).
func (s *Store) ApprovePin(ctx context.Context, toolID, digest, by string, at time.Time) (*store.Pin, error) {
	const op = "approve pin"
	tx, err := s.beginWrite(ctx, op)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	p, err := s.getPin(ctx, tx.QueryRow(ctx, `SELECT body FROM tool_pins WHERE tool_id = $1 FOR UPDATE`, toolID), op, toolID)
	if err != nil {
		return nil, err
	}
	next, err := p.Approve(digest, by, at)
	if err != nil {
		return nil, err
	}
	body, err := store.MarshalPin(next)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, op)
	}
	if _, err := tx.Exec(ctx, `UPDATE tool_pins SET body = $1, updated_at = $2 WHERE tool_id = $3`, string(body), time.Now().UTC(), toolID); err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return &next, nil
}
