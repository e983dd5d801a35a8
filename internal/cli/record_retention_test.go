package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// TestPruneRecordings: the audit.record_retention loop deletes, at once,
// the recorded calls that started before now - retention, and keeps the
// newer ones.
func TestPruneRecordings(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, c := range []struct {
		id string
		at time.Time
	}{{"old", time.Now().Add(-48 * time.Hour)}, {"new", time.Now()}} {
		if err := st.AppendRecordedCall(ctx, &store.RecordedCall{Tenant: "acme", RunID: "r", CallID: c.id, Principal: "p", ToolID: "native:x",
			ArgsHash: "h", Args: json.RawMessage(`{}`), Status: "ok", StartedAt: c.at}); err != nil {
			t.Fatal(err)
		}
	}
	stop := pruneRecordings(ctx, st, 24*time.Hour, time.Hour, slog.New(slog.DiscardHandler))
	waitUntil(t, 30*time.Second, "old recording pruned", func() bool {
		_, err := st.RecordedCall(ctx, "acme", "old")
		return errcode.CodeOf(err) == errcode.NotFound
	})
	stop()
	if _, err := st.RecordedCall(ctx, "acme", "new"); err != nil {
		t.Errorf("a recording within the retention was pruned: %v", err)
	}
}
