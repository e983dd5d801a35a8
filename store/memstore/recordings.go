package memstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// AppendRecordedCall implements store.Recordings.AppendRecordedCall.
func (s *Store) AppendRecordedCall(ctx context.Context, c *store.RecordedCall) error {
	const op = "append recorded call"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed(op)
	}
	k := recKey{c.Tenant, c.CallID}
	if _, dup := s.recorded[k]; dup {
		return errcode.Errorf(errcode.Conflict, "recorded call %q already exists", c.CallID).WithDetails(map[string]any{"field": "callId"})
	}
	rk := runKey{c.Tenant, c.RunID}
	cp := *c
	cp.Seq = int64(len(s.recRuns[rk]))
	cp.StartedAt = cp.StartedAt.UTC()
	body, err := json.Marshal(&cp)
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "recorded call")
	}
	s.recorded[k] = body
	s.recRuns[rk] = append(s.recRuns[rk], k)
	c.Seq = cp.Seq
	return nil
}

// RecordedCall implements store.Recordings.RecordedCall.
func (s *Store) RecordedCall(ctx context.Context, tenant, callID string) (*store.RecordedCall, error) {
	if err := s.readable(ctx, "recorded call"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	body, ok := s.recorded[recKey{tenant, callID}]
	s.mu.RUnlock()
	if !ok {
		return nil, errcode.Errorf(errcode.NotFound, "recorded call %q not found", callID)
	}
	var c store.RecordedCall
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "stored recorded call")
	}
	return &c, nil
}

// RecordedRun implements store.Recordings.RecordedRun.
func (s *Store) RecordedRun(ctx context.Context, tenant, runID string) ([]store.RecordedCall, error) {
	if err := s.readable(ctx, "recorded run"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	var bodies [][]byte
	for _, k := range s.recRuns[runKey{tenant, runID}] {
		if b, ok := s.recorded[k]; ok {
			bodies = append(bodies, b)
		}
	}
	s.mu.RUnlock()
	out := make([]store.RecordedCall, 0, len(bodies))
	for _, b := range bodies {
		var c store.RecordedCall
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "stored recorded call")
		}
		out = append(out, c)
	}
	store.SortRecorded(out)
	if len(out) > store.MaxRecordedRun {
		out = out[:store.MaxRecordedRun]
	}
	return out, nil
}

// PruneRecordings implements store.Recordings.PruneRecordings: a call is
// stored when it is appended, which in memory is its StartedAt's run; the
// memstore prunes by StartedAt.
func (s *Store) PruneRecordings(ctx context.Context, before time.Time) (int64, error) {
	const op = "prune recordings"
	if err := store.ContextError(ctx, op); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed(op)
	}
	var n int64
	for rk, keys := range s.recRuns {
		kept := keys[:0]
		for _, k := range keys {
			var c struct {
				StartedAt time.Time `json:"startedAt"`
			}
			if json.Unmarshal(s.recorded[k], &c) == nil && c.StartedAt.Before(before) {
				delete(s.recorded, k)
				n++
				continue
			}
			kept = append(kept, k)
		}
		if len(kept) == 0 {
			delete(s.recRuns, rk)
		} else {
			s.recRuns[rk] = kept
		}
	}
	return n, nil
}
