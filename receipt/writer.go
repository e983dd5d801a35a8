package receipt

import (
	"io"
	"sync"

	"github.com/toolgate/toolgate/errcode"
)

// Writer writes receipts and checkpoints to an io.Writer as JSON Lines: one
// canonical (RFC 8785) JSON object per line, each line ending in "\n",
// written with a single Write call. It does not buffer; wrap the destination
// in a bufio.Writer and flush it if batching matters. Safe for concurrent
// use: lines are never interleaved.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteReceipt writes r as one line. r must be linked (Chain.Append set its
// hash); the line is r's canonical form including "hash" and "sig".
//
// Errors: errcode.InvalidArgument if r is nil, not linked, or not encodable
// (see Hash); errcode.AuditUnavailable wrapping the cause if the underlying
// write fails.
func (w *Writer) WriteReceipt(r *Receipt) error {
	if r == nil || r.Hash == "" {
		return errcode.New(errcode.InvalidArgument, "receipt: write: the receipt is not linked (append it to a Chain first)")
	}
	if p := checkEncodable(r); p != nil {
		return errcode.New(errcode.InvalidArgument, "receipt: write: "+p.String())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(appendReceipt(w.buf[:0], r, true, nil), '\n')
	return w.flush()
}

// WriteCheckpoint writes cp as one line {"checkpoint":{…},"sig":"…"}. Write
// it after the receipt it references.
//
// Errors: errcode.InvalidArgument if cp is nil, unsigned or not encodable;
// errcode.AuditUnavailable wrapping the cause if the underlying write fails.
func (w *Writer) WriteCheckpoint(cp *Checkpoint) error {
	if cp == nil || cp.Sig == "" {
		return errcode.New(errcode.InvalidArgument, "receipt: write: the checkpoint is not signed")
	}
	if p := checkCheckpointEncodable(cp); p != nil {
		return errcode.New(errcode.InvalidArgument, "receipt: write checkpoint: "+p.String())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(appendCheckpointLine(w.buf[:0], cp), '\n')
	return w.flush()
}

func (w *Writer) flush() error {
	n, err := w.w.Write(w.buf)
	if err == nil && n != len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return errcode.Wrap(errcode.AuditUnavailable, err, "receipt: write")
	}
	return nil
}
