package sqlite

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func signerN(n byte) *receipt.Signer {
	return receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, 32)))
}

// openAt opens a store at path, failing the test on error; the store is
// closed at cleanup.
func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	if opts.Signer == nil {
		opts.Signer = signerN(1)
	}
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tempDB(t testing.TB) string { return filepath.Join(t.TempDir(), "toolgate.db") }

func event(t testing.TB, tenant, run string, n int, payloadBytes int) *audit.Event {
	t.Helper()
	payload := fmt.Sprintf(`{"n":%d}`, n)
	if payloadBytes > 0 {
		payload = fmt.Sprintf(`{"n":%d,"pad":%q}`, n, bytes.Repeat([]byte{'x'}, payloadBytes))
	}
	ev, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(payload), "", t0)
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	ev.Tenant = tenant
	return ev
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func rcpt(id string) *receipt.Receipt {
	d := int64(1)
	return &receipt.Receipt{
		ReceiptID: "rcpt_" + id, CallID: "call_" + id, RunID: "run_1", AgentID: "agent.planner",
		Principal: "alice", Tenant: "acme", ToolID: "native:text.echo", Transport: "native",
		Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
		RequestedArgsHash: sha(id), ExecutedArgsHash: sha(id), Status: receipt.StatusOK, StartedAt: t0, DurationMs: &d,
	}
}

func wantCode(t testing.TB, err error, code errcode.Code, what string) {
	t.Helper()
	if !errors.Is(err, &errcode.Error{Code: code}) {
		t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
}

// blockWriter makes the writer run an operation that waits until release is
// called; it returns once the writer is inside it (its transaction open).
// The blocked operation itself succeeds.
func blockWriter(t testing.TB, s *Store) (release func()) {
	t.Helper()
	inside, gate, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.runOp(context.Background(), "block", func(*writer) error {
			close(inside)
			<-gate
			return nil
		})
	}()
	select {
	case <-inside:
	case <-time.After(time.Minute):
		t.Fatal("the writer did not pick up the blocking operation")
	}
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("blocking operation: %v", err)
		}
	}
}

// waitQueued waits until n requests wait in the writer's queue. It yields
// the processor between looks; the writer is blocked, so the count only
// grows.
func waitQueued(t testing.TB, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(s.w.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests queued", len(s.w.reqs), n)
		}
		runtime.Gosched()
	}
}

// verifyExport exports s's chain and verifies it with s's key.
func verifyExport(t testing.TB, s *Store) *receipt.Report {
	t.Helper()
	var buf bytes.Buffer
	if err := s.ExportReceipts(context.Background(), &buf, s.ChainID(), 0); err != nil {
		t.Fatalf("ExportReceipts: %v", err)
	}
	rep, err := receipt.Verify(&buf, s.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}
