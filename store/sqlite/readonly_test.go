package sqlite

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// setReadOnly makes the store's write connection refuse writes at the
// SQLite level, as a read-only database file does: SQLite answers
// SQLITE_READONLY ("attempt to write a readonly database") from then on,
// starting with the next BEGIN IMMEDIATE. A chmod would not do in CI, which
// runs as root (and SQLite checks permissions only when it opens a file).
func setReadOnly(t *testing.T, s *Store) {
	t.Helper()
	if err := s.runOp(context.Background(), "test", func(w *writer) error {
		_, err := w.conn.ExecContext(context.Background(), "PRAGMA query_only = 1")
		return err
	}); err != nil {
		t.Fatalf("PRAGMA query_only = 1: %v", err)
	}
}

// Issue 3, acceptance 3 (read-only file): a gateway whose SQLite database
// turns read-only refuses every call with audit_unavailable and never
// invokes the tool; once the database is writable again (the gateway
// restarted on it), calls succeed and the receipt chain verifies without a
// gap.
func TestReadOnlyDatabaseRefusesCalls(t *testing.T) {
	ctx := context.Background()
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := tempDB(t)
	s := openAt(t, path, Options{Signer: receipt.NewSigner(key)})
	spec, err := policy.Parse("test.yaml", []byte("rules: [{id: all, effect: allow, tools: ['*']}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	gateway := func(s *Store) *toolgate.Gateway {
		gw, err := toolgate.New(toolgate.Options{Policy: prog, SigningKey: key, Events: store.EventLog(s), Receipts: store.ReceiptLog(s)})
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:fs.delete", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
			func(context.Context, json.RawMessage) (any, error) { ran.Add(1); return "deleted", nil }); err != nil {
			t.Fatal(err)
		}
		return gw
	}
	gw := gateway(s)
	alice := toolgate.Principal{ID: "alice", Tenant: "acme"}
	call := func() *toolgate.Result {
		t.Helper()
		res, err := gw.Call(ctx, toolgate.Call{Tool: "native:fs.delete", Principal: alice, RunID: "run-ro"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(); res.Status != audit.StatusOK {
		t.Fatalf("writable store: %+v", res)
	}

	setReadOnly(t, s)
	err = s.AppendEvents(ctx, event(t, "acme", "run-ro", 0, 0))
	wantCode(t, err, errcode.AuditUnavailable, "append to a read-only database")
	if !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("the error does not name the cause: %v", err)
	}
	for range 3 {
		res := call()
		if res.Status != audit.StatusError || res.Err == nil || res.Err.Code != errcode.AuditUnavailable || res.Output != nil {
			t.Fatalf("read-only store: %+v, want status error with audit_unavailable", res)
		}
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want 1 (only before the store turned read-only)", n)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{Signer: receipt.NewSigner(key)})
	gw = gateway(s)
	if res := call(); res.Status != audit.StatusOK {
		t.Fatalf("store writable again: %+v", res)
	}
	if rep := verifyExport(t, s); rep.Receipts != 2 {
		t.Fatalf("%d receipts verified, want 2 (the refused calls left none)", rep.Receipts)
	}
	evs, err := s.EventsByRun(ctx, "acme", "run-ro", -1, 0)
	if err != nil || len(evs) != 4 {
		t.Fatalf("run events: %d (%v), want 4: called+returned of the two calls that ran", len(evs), err)
	}
}
