package store

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

// FromStart is the cursor that starts before the first stored event: for
// EventsByTime it is the same as "", for Follow it replays every stored
// event before switching to live delivery.
const FromStart = "start"

// Cursor is the decoded form of the opaque cursors of EventsByTime and
// Follow: the position of one stored event. Clients treat cursors as opaque
// strings; backends encode and decode them with String and ParseCursor so
// that every backend accepts every other's cursors. Follow refuses a
// well-formed cursor whose position is beyond the store's newest committed
// event (ErrCursorAhead).
type Cursor struct {
	// Time is the event's Timestamp (EventsByTime orders by it).
	Time time.Time
	// Pos is the event's position in the store's commit order: ≥ 1,
	// increasing with every stored event, never reused. Pos 0 (with a zero
	// Time) is the start, before every event.
	Pos int64
}

// String encodes c as an opaque, URL-safe cursor string. The zero Cursor
// encodes as FromStart.
func (c Cursor) String() string {
	if c.Pos == 0 {
		return FromStart
	}
	t := c.Time.UTC()
	raw := "1." + strconv.FormatInt(c.Pos, 10) + "." + strconv.FormatInt(t.Unix(), 10) + "." + strconv.Itoa(t.Nanosecond())
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// IsStart reports whether c is the start position (FromStart).
func (c Cursor) IsStart() bool { return c.Pos == 0 }

// ParseCursor decodes a cursor produced by Cursor.String. "" and FromStart
// decode to the zero Cursor (the start). Errors: *errcode.Error
// InvalidArgument with details.field "cursor" for anything else.
func ParseCursor(s string) (Cursor, error) {
	if s == "" || s == FromStart {
		return Cursor{}, nil
	}
	bad := func() (Cursor, error) {
		return Cursor{}, errcode.New(errcode.InvalidArgument, "malformed cursor").
			WithDetails(map[string]any{"field": "cursor"})
	}
	if len(s) > 128 {
		return bad()
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad()
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 4 || parts[0] != "1" {
		return bad()
	}
	pos, err1 := strconv.ParseInt(parts[1], 10, 64)
	sec, err2 := strconv.ParseInt(parts[2], 10, 64)
	nsec, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || pos < 1 || nsec < 0 || nsec >= 1e9 {
		return bad()
	}
	return Cursor{Time: time.Unix(sec, nsec).UTC(), Pos: pos}, nil
}

// ErrCursorAhead is the error of Follow (store.Feed) for a well-formed
// cursor whose position is greater than that of the last committed event:
// it comes from no event of this store's log (another store's, or a made-up
// one). *errcode.Error InvalidArgument with details.field "cursor".
func ErrCursorAhead() *errcode.Error {
	return errcode.New(errcode.InvalidArgument, "cursor is ahead of the log").
		WithDetails(map[string]any{"field": "cursor"})
}
