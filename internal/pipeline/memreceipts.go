package pipeline

import (
	"context"
	"io"
	"sync"

	"github.com/toolgate/toolgate/receipt"
)

// MemoryReceipts is an in-memory ReceiptLog over a receipt.Chain: receipts
// are linked in append order and kept in memory; WriteTo exports them as a
// JSON Lines file ending with a signed checkpoint that covers them all.
// Safe for concurrent use.
type MemoryReceipts struct {
	chain *receipt.Chain
	mu    sync.Mutex
	lines []any // *receipt.Receipt or *receipt.Checkpoint, in order
}

// NewMemoryReceipts returns an empty log signing with s.
func NewMemoryReceipts(s *receipt.Signer) *MemoryReceipts {
	return &MemoryReceipts{chain: receipt.NewChain(s, receipt.Options{})}
}

// Append links r into the chain and keeps it.
func (m *MemoryReceipts) Append(_ context.Context, r *receipt.Receipt) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.chain.Append(r); err != nil {
		return err
	}
	m.lines = append(m.lines, r)
	return nil
}

// Receipts returns the stored receipts in chain order.
func (m *MemoryReceipts) Receipts() []*receipt.Receipt {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*receipt.Receipt
	for _, l := range m.lines {
		if r, ok := l.(*receipt.Receipt); ok {
			out = append(out, r)
		}
	}
	return out
}

// WriteTo writes every receipt and checkpoint as JSON Lines, signing a
// checkpoint over the current head first so every receipt is covered.
func (m *MemoryReceipts) WriteTo(w io.Writer) (int64, error) {
	m.mu.Lock()
	if cp, ok := m.chain.Checkpoint(); ok {
		m.lines = append(m.lines, cp)
	}
	lines := append([]any(nil), m.lines...)
	m.mu.Unlock()
	cw := &countWriter{w: w}
	rw := receipt.NewWriter(cw)
	for _, l := range lines {
		var err error
		switch x := l.(type) {
		case *receipt.Receipt:
			err = rw.WriteReceipt(x)
		case *receipt.Checkpoint:
			err = rw.WriteCheckpoint(x)
		}
		if err != nil {
			return cw.n, err
		}
	}
	return cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
