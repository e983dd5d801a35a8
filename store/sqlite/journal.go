package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// The journal is the durability point of the per-call writes (events,
// receipts, checkpoints) of a Store that owns it: an append-only file next
// to the database, path + JournalSuffix. The writer appends one frame per
// group commit with one write(2) (and one fdatasync under synchronous
// "full") and acknowledges the group's callers; the same rows are inserted
// into an SQLite transaction the writer keeps open, which it commits only
// now and then (see writer.apply). After such a commit the journal is
// truncated. At Open, the frames of a journal that is not empty (the
// process ended before its last commit) are inserted into SQLite,
// idempotently, before anything else happens.
//
// A frame is
//
//	length   uint32, little endian: the payload's length in bytes
//	crc      uint32, little endian: CRC-32C (Castagnoli) of length's 4 bytes and the payload
//	payload  length bytes
//
// and a payload is a version byte (journalVersion) followed by items, each a
// kind byte and its fields; integers are unsigned varints (signed ones
// zig-zag varints), strings and byte strings a uvarint length and the bytes:
//
//	itemEvent      pos, seq (varint), event_id, tenant, run_id, type, ts (stored form), causation_id, schema_version (varint), payload, principal
//	itemReceipt    chain_id, seq (uvarint), receipt_id, tenant, body
//	itemCheckpoint chain_id, seq (uvarint), body

// JournalSuffix is appended to a Store's database path to name its
// journal file (toolgate.db → toolgate.db.tgjournal).
const JournalSuffix = ".tgjournal"

const (
	journalVersion = 1
	frameHeader    = 8
	// maxFrame bounds a frame's payload: larger lengths are corruption.
	maxFrame = 256 << 20

	itemEvent      = 1
	itemReceipt    = 2
	itemCheckpoint = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// jEvent, jReceipt and jCheckpoint are the rows a journal frame carries,
// in their stored form.
type jEvent struct {
	Pos, Seq                                      int64
	EventID, Tenant, RunID, Type, TS, CausationID string
	SchemaVersion                                 int64
	Payload                                       []byte
	Principal                                     string
}

type jReceipt struct {
	ChainID           string
	Seq               uint64
	ReceiptID, Tenant string
	Body              []byte
}

type jCheckpoint struct {
	ChainID string
	Seq     uint64
	Body    []byte
}

// jFrame is one decoded frame: the rows of one group commit, each kind in
// the order it was written.
type jFrame struct {
	Events      []jEvent
	Receipts    []jReceipt
	Checkpoints []jCheckpoint
}

func (f *jFrame) empty() bool {
	return len(f.Events) == 0 && len(f.Receipts) == 0 && len(f.Checkpoints) == 0
}

func (f *jFrame) reset() {
	clear(f.Events)
	f.Events = f.Events[:0]
	clear(f.Receipts)
	f.Receipts = f.Receipts[:0]
	clear(f.Checkpoints)
	f.Checkpoints = f.Checkpoints[:0]
}

// appendFrame appends f's frame (header and payload) to buf.
func appendFrame(buf []byte, f *jFrame) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, frameHeader)...)
	buf = append(buf, journalVersion)
	str := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	byt := func(b []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		buf = append(buf, b...)
	}
	for i := range f.Events {
		e := &f.Events[i]
		buf = append(buf, itemEvent)
		buf = binary.AppendVarint(buf, e.Pos)
		buf = binary.AppendVarint(buf, e.Seq)
		str(e.EventID)
		str(e.Tenant)
		str(e.RunID)
		str(e.Type)
		str(e.TS)
		str(e.CausationID)
		buf = binary.AppendVarint(buf, e.SchemaVersion)
		byt(e.Payload)
		str(e.Principal)
	}
	for i := range f.Receipts {
		r := &f.Receipts[i]
		buf = append(buf, itemReceipt)
		str(r.ChainID)
		buf = binary.AppendUvarint(buf, r.Seq)
		str(r.ReceiptID)
		str(r.Tenant)
		byt(r.Body)
	}
	for i := range f.Checkpoints {
		c := &f.Checkpoints[i]
		buf = append(buf, itemCheckpoint)
		str(c.ChainID)
		buf = binary.AppendUvarint(buf, c.Seq)
		byt(c.Body)
	}
	n := len(buf) - start - frameHeader
	binary.LittleEndian.PutUint32(buf[start:], uint32(n))
	crc := crc32.Update(0, castagnoli, buf[start:start+4])
	crc = crc32.Update(crc, castagnoli, buf[start+frameHeader:])
	binary.LittleEndian.PutUint32(buf[start+4:], crc)
	return buf
}

// errTorn is returned by nextFrame for a frame that runs past the end of
// the data (a write cut short).
var errTorn = errors.New("torn frame")

// nextFrame decodes the frame at the start of data, returning it and its
// total size. errTorn: data ends inside the frame; any other error: the
// frame is corrupt (checksum, lengths, fields).
func nextFrame(data []byte) (*jFrame, int, error) {
	if len(data) < frameHeader {
		return nil, 0, errTorn
	}
	n := binary.LittleEndian.Uint32(data)
	if uint64(len(data)-frameHeader) < uint64(n) {
		return nil, 0, errTorn
	}
	if n > maxFrame {
		return nil, 0, fmt.Errorf("frame length %d exceeds %d", n, maxFrame)
	}
	payload := data[frameHeader : frameHeader+int(n)]
	crc := crc32.Update(0, castagnoli, data[:4])
	crc = crc32.Update(crc, castagnoli, payload)
	if crc != binary.LittleEndian.Uint32(data[4:]) {
		return nil, 0, errors.New("checksum mismatch")
	}
	f, err := decodePayload(payload)
	if err != nil {
		return nil, 0, err
	}
	return f, frameHeader + int(n), nil
}

// decodePayload decodes a frame's payload (see the format above).
func decodePayload(p []byte) (*jFrame, error) {
	if len(p) == 0 || p[0] != journalVersion {
		return nil, errors.New("unknown payload version")
	}
	d := decoder{p: p[1:]}
	f := new(jFrame)
	for len(d.p) > 0 && d.err == nil {
		kind := d.p[0]
		d.p = d.p[1:]
		switch kind {
		case itemEvent:
			var e jEvent
			e.Pos, e.Seq = d.varint(), d.varint()
			e.EventID, e.Tenant, e.RunID, e.Type, e.TS, e.CausationID = d.str(), d.str(), d.str(), d.str(), d.str(), d.str()
			e.SchemaVersion = d.varint()
			e.Payload, e.Principal = d.bytes(), d.str()
			f.Events = append(f.Events, e)
		case itemReceipt:
			var r jReceipt
			r.ChainID, r.Seq, r.ReceiptID, r.Tenant, r.Body = d.str(), d.uvarint(), d.str(), d.str(), d.bytes()
			f.Receipts = append(f.Receipts, r)
		case itemCheckpoint:
			var c jCheckpoint
			c.ChainID, c.Seq, c.Body = d.str(), d.uvarint(), d.bytes()
			f.Checkpoints = append(f.Checkpoints, c)
		default:
			return nil, fmt.Errorf("unknown item kind %d", kind)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return f, nil
}

// decoder reads the fields of a payload; the first error sticks.
type decoder struct {
	p   []byte
	err error
}

var errShort = errors.New("payload ends inside a field")

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.p)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.p)) {
		d.err = errShort
		return nil
	}
	b := d.p[:n:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// scanJournal decodes every frame of data. A frame that runs past the end
// of data, or a bad last frame, or trailing zero bytes are a torn tail:
// scanJournal returns the frames before it and good, the length of data
// they cover (the caller cuts the rest). A bad frame followed by more data
// is corruption in the middle of the journal: an error naming its offset.
func scanJournal(data []byte) (frames []*jFrame, good int, err error) {
	for good < len(data) {
		f, n, err := nextFrame(data[good:])
		if err == nil {
			frames = append(frames, f)
			good += n
			continue
		}
		if errors.Is(err, errTorn) || allZero(data[good:]) {
			return frames, good, nil
		}
		// A bad frame: torn if it is the last one (its declared end is
		// the end of the data), corruption otherwise.
		if len(data[good:]) >= frameHeader {
			if end := frameHeader + int(binary.LittleEndian.Uint32(data[good:])); end == len(data[good:]) {
				return frames, good, nil
			}
		}
		return nil, 0, fmt.Errorf("corrupt frame at offset %d of %d: %w", good, len(data), err)
	}
	return frames, good, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// journal is the open journal file of a Store that owns it (an exclusive
// flock on the file). Only the writer goroutine uses it after Open.
type journal struct {
	f    *os.File
	path string
	sync bool  // fdatasync after each append (synchronous "full")
	size int64 // bytes appended since the last truncation
	buf  []byte
	// writeHook, if set, replaces the frame's write (tests: a short write
	// that fails).
	writeHook func(f *os.File, b []byte, off int64) error
}

// openJournal opens (creating it, mode 0600) and locks the journal of the
// database at path. It returns nil, nil when another Store (of this or
// another process) holds the journal: this Store then writes without one.
func openJournal(path string, sync bool) (*journal, error) {
	name := path + JournalSuffix
	f, err := openPrivate(name, os.O_RDWR)
	if err != nil {
		return nil, store.Unavailable("open store: journal "+name, err)
	}
	ok, err := tryFlock(f)
	if err != nil || !ok {
		f.Close()
		if err != nil {
			return nil, store.Unavailable("open store: lock journal "+name, err)
		}
		return nil, nil
	}
	return &journal{f: f, path: name, sync: sync}, nil
}

// recover reads the journal, cuts a torn tail and returns its frames.
// Errors: AuditUnavailable for a read failure or a corrupt frame followed by
// more frames (never dropped silently).
func (j *journal) recover() ([]*jFrame, error) {
	data, err := io.ReadAll(io.NewSectionReader(j.f, 0, 1<<62))
	if err != nil {
		return nil, store.Unavailable("open store: read journal "+j.path, err)
	}
	frames, good, err := scanJournal(data)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable,
			"open store: journal %s is corrupt: %v; nothing was applied: move the file aside to open the store without it (its later records are then lost) or restore from a backup", j.path, err).
			WithDetails(map[string]any{"journal": j.path})
	}
	if good < len(data) {
		if err := j.f.Truncate(int64(good)); err != nil {
			return nil, store.Unavailable("open store: cut the journal's torn tail", err)
		}
	}
	j.size = int64(good)
	return frames, nil
}

// append writes f's frame with one write(2) at the end of the journal, and
// fdatasyncs it under synchronous "full". On failure it cuts the journal
// back to its previous length; if even that fails, the error says so and
// the journal must not be appended to again.
func (j *journal) append(f *jFrame) (cutFailed bool, err error) {
	j.buf = appendFrame(j.buf[:0], f)
	if j.writeHook != nil {
		err = j.writeHook(j.f, j.buf, j.size)
	} else {
		_, err = j.f.WriteAt(j.buf, j.size)
	}
	if err == nil && j.sync {
		err = fdatasync(j.f)
	}
	if err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			return true, fmt.Errorf("%w; cutting the journal back failed too: %v", err, terr)
		}
		return false, err
	}
	j.size += int64(len(j.buf))
	if cap(j.buf) > 1<<20 {
		j.buf = nil
	}
	return false, nil
}

// truncate empties the journal once its frames are committed to SQLite.
// Under "normal" (no sync per append) it then syncs the file once, so that
// after a power loss the file never shows new frames written over the
// start of old ones (which would read as corruption in the middle); under
// "full" the next append's fdatasync persists the new length anyway.
func (j *journal) truncate() error {
	if j.size == 0 {
		return nil
	}
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	j.size = 0
	if !j.sync {
		return fdatasync(j.f)
	}
	return nil
}

func (j *journal) close() error {
	if j == nil || j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// replayStmts are the idempotent inserts of journal rows: a row already
// stored (same event id or position; same receipt id or chain seq; same
// checkpoint) is left as it is.
const (
	replayEvent      = `INSERT OR IGNORE INTO events (pos, ` + eventColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	replayReceipt    = `INSERT OR IGNORE INTO receipts (chain_id, seq, receipt_id, tenant, body) VALUES (?, ?, ?, ?, ?)`
	replayCheckpoint = `INSERT OR IGNORE INTO checkpoints (chain_id, seq, body) VALUES (?, ?, ?)`
)

// execer is *sql.Conn or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// replayFrames inserts the frames' rows through q (inside the caller's
// transaction), idempotently.
func replayFrames(ctx context.Context, q execer, frames []*jFrame) error {
	for _, f := range frames {
		for i := range f.Events {
			e := &f.Events[i]
			if _, err := q.ExecContext(ctx, replayEvent, e.Pos, e.EventID, e.Tenant, e.RunID, e.Seq, e.Type, e.TS,
				e.CausationID, e.SchemaVersion, e.Payload, e.Principal); err != nil {
				return err
			}
		}
		for i := range f.Receipts {
			r := &f.Receipts[i]
			if _, err := q.ExecContext(ctx, replayReceipt, r.ChainID, int64(r.Seq), r.ReceiptID, r.Tenant, r.Body); err != nil {
				return err
			}
		}
		for i := range f.Checkpoints {
			c := &f.Checkpoints[i]
			if _, err := q.ExecContext(ctx, replayCheckpoint, c.ChainID, int64(c.Seq), c.Body); err != nil {
				return err
			}
		}
	}
	return nil
}

// replayJournal applies, at Open, the frames a previous owner of the
// journal acknowledged but did not commit to SQLite (it ended before its
// next apply), in one transaction, then truncates the journal.
func replayJournal(ctx context.Context, conn *sql.Conn, j *journal, log interface {
	Info(msg string, args ...any)
}) error {
	frames, err := j.recover()
	if err != nil {
		return err
	}
	if len(frames) > 0 {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return store.Unavailable("open store: replay the journal", err)
		}
		if err := replayFrames(ctx, tx, frames); err != nil {
			tx.Rollback()
			return store.Unavailable("open store: replay the journal", err)
		}
		if err := tx.Commit(); err != nil {
			return store.Unavailable("open store: replay the journal", err)
		}
		log.Info("store: replayed the journal into the database", "frames", len(frames), "journal", j.path)
	}
	if err := j.truncate(); err != nil {
		return store.Unavailable("open store: truncate the journal", err)
	}
	return nil
}
