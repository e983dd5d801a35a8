package memstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// ListPins implements store.Pins.ListPins.
func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	if err := s.readable(ctx, "list pins"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]store.Pin, 0, len(s.pins))
	for _, p := range s.pins {
		out = append(out, store.ClonePin(p))
	}
	slices.SortFunc(out, func(a, b store.Pin) int { return strings.Compare(a.ToolID, b.ToolID) })
	return out, nil
}

// GetPin implements store.Pins.GetPin.
func (s *Store) GetPin(ctx context.Context, toolID string) (*store.Pin, error) {
	if err := s.readable(ctx, "get pin"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pins[toolID]
	if !ok {
		return nil, errcode.Errorf(errcode.NotFound, "no pin for tool %q", toolID)
	}
	cp := store.ClonePin(p)
	return &cp, nil
}

// PutPin implements store.Pins.PutPin.
func (s *Store) PutPin(ctx context.Context, p *store.Pin) error {
	if err := store.ContextError(ctx, "put pin"); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed("put pin")
	}
	s.pins[p.ToolID] = store.ClonePin(*p)
	return nil
}

// ApprovePin implements store.Pins.ApprovePin.
func (s *Store) ApprovePin(ctx context.Context, toolID, digest, by string, at time.Time) (*store.Pin, error) {
	if err := store.ContextError(ctx, "approve pin"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed("approve pin")
	}
	p, ok := s.pins[toolID]
	if !ok {
		return nil, errcode.Errorf(errcode.NotFound, "no pin for tool %q", toolID)
	}
	next, err := p.Approve(digest, by, at)
	if err != nil {
		return nil, err
	}
	s.pins[toolID] = store.ClonePin(next)
	cp := store.ClonePin(next)
	return &cp, nil
}
