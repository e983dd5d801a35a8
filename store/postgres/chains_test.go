package postgres_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/postgres"
)

// okReceipt is a valid receipt with id id.
func okReceipt(id string) *receipt.Receipt {
	d := int64(1)
	return &receipt.Receipt{ReceiptID: "rcpt_" + id, CallID: "call_" + id, RunID: "run_r", AgentID: "a",
		Principal: "alice", Tenant: "acme", ToolID: "mcp:fs.read", Transport: "mcp",
		Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
		RequestedArgsHash: hex.EncodeToString(make([]byte, 32)), ExecutedArgsHash: hex.EncodeToString(make([]byte, 32)),
		Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d}
}

// Issue 14 point 7: a second Store signing with a key another open Store
// of the same schema already signs with is refused at Open (it would
// continue that replica's chain), with InvalidConfig naming the chain; it
// opens once the first one is closed. A Store opened with NoReceipts (the
// CLI) opens beside it and refuses receipts.
func TestSameKeySecondReplicaRefused(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	first, err := postgres.Open(ctx, dsn, postgres.Options{Signer: signer(41)})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.AppendReceipt(ctx, okReceipt("1")); err != nil {
		t.Fatal(err)
	}
	second, err := postgres.Open(ctx, dsn, postgres.Options{Signer: signer(41)})
	if err == nil {
		second.Close()
		t.Fatal("a second Store with the same key opened")
	}
	e := errcode.As(err)
	if e == nil || e.Code != errcode.InvalidConfig || !strings.Contains(e.Message, signer(41).KeyID()) ||
		!strings.Contains(e.Message, "each replica needs its own key") || e.Details["chainId"] != signer(41).KeyID() {
		t.Fatalf("second Open: %v (%#v)", err, e)
	}
	// Another key is another chain: it opens.
	other, err := postgres.Open(ctx, dsn, postgres.Options{Signer: signer(42)})
	if err != nil {
		t.Fatalf("another key: %v", err)
	}
	defer other.Close()
	reader, err := postgres.Open(ctx, dsn, postgres.Options{NoReceipts: true})
	if err != nil {
		t.Fatalf("NoReceipts beside a replica: %v", err)
	}
	if err := reader.AppendReceipt(ctx, okReceipt("x")); errcode.As(err) == nil || errcode.As(err).Code != errcode.InvalidArgument {
		t.Fatalf("NoReceipts AppendReceipt: %v", err)
	}
	if reader.ChainID() != "" || reader.PublicKey() != nil {
		t.Fatalf("NoReceipts without signer: chain %q key %x", reader.ChainID(), reader.PublicKey())
	}
	reader.Close()
	// The first one still appends, without a fork.
	if err := first.AppendReceipt(ctx, okReceipt("2")); err != nil {
		t.Fatalf("first after the refusal: %v", err)
	}
	first.Close()
	again, err := postgres.Open(ctx, dsn, postgres.Options{Signer: signer(41)})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer again.Close()
	r := okReceipt("3")
	if err := again.AppendReceipt(ctx, r); err != nil || r.Seq != 2 {
		t.Fatalf("reopened chain continues: seq %d, %v", r.Seq, err)
	}
}

// Chains lists every replica's chain with its recorded key, its receipt
// count, head and newest checkpoint; a key that signed nothing yet is
// listed with no receipts.
func TestChainsTwoReplicas(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	a, b := open(t, dsn, 51), open(t, dsn, 52)
	for i, s := range []*postgres.Store{a, a, a, b} {
		if err := s.AppendReceipt(ctx, okReceipt(string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	idle := open(t, dsn, 53)
	cs, err := idle.Chains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		n    int64
		head uint64
	}{signer(51).KeyID(): {3, 2}, signer(52).KeyID(): {1, 0}, signer(53).KeyID(): {0, 0}}
	if len(cs) != 3 {
		t.Fatalf("chains: %+v", cs)
	}
	for _, c := range cs {
		w, ok := want[c.ID]
		if !ok || c.Receipts != w.n || c.HeadSeq != w.head || receipt.KeyID(c.PublicKey) != c.ID || c.FirstSeen.IsZero() {
			t.Fatalf("chain %+v, want %+v", c, w)
		}
		if c.Checkpoint != (w.n > 0) || (w.n > 0 && c.CheckpointSeq != w.head) {
			t.Fatalf("chain %s checkpoint %v at %d", c.ID, c.Checkpoint, c.CheckpointSeq)
		}
	}
}

// A chain head no stored checkpoint covers (changed outside toolgate) is
// refused at Open, as on SQLite, instead of being signed; a reader
// (NoReceipts) still opens to show it.
func TestOpenRefusesUncoveredHead(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Signer: signer(61)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2"} {
		if err := s.AppendReceipt(ctx, okReceipt(id)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DELETE FROM checkpoints WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, dsn, postgres.Options{Signer: signer(61)})
	if e := errcode.As(err); e == nil || e.Code != errcode.AuditUnavailable || !strings.Contains(e.Message, "the stored head (seq 1) is not covered by a signed checkpoint (highest: seq 0)") {
		t.Fatalf("Open with an uncovered head: %v", err)
	}
	r, err := postgres.Open(ctx, dsn, postgres.Options{NoReceipts: true})
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	defer r.Close()
	cs, err := r.Chains(ctx)
	if err != nil || len(cs) != 1 || cs[0].HeadSeq != 1 || cs[0].CheckpointSeq != 0 {
		t.Fatalf("chains: %+v %v", cs, err)
	}
}

// A Store whose chain-lock connection dropped writes nothing while another
// Store with its key holds the lock (no two writers alternate on one
// chain), says so from Ping, and writes again, continuing the stored chain,
// once the lock is free and it holds it again.
func TestChainLockLostFencesWrites(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	app := "tg_fence_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	a, err := postgres.Open(ctx, u.String(), postgres.Options{Signer: signer(51)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.AppendReceipt(ctx, okReceipt("a1")); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, testDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// Every connection of a drops: its pool, its listener and its lock.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
	// b, with the same key, takes the free lock (retrying while the
	// server finishes a's terminated session).
	var b *postgres.Store
	eventually(t, func() bool {
		b, err = postgres.Open(ctx, dsn, postgres.Options{Signer: signer(51)})
		return err == nil
	})
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	if err := b.AppendReceipt(ctx, okReceipt("b1")); err != nil {
		t.Fatal(err)
	}
	// a notices the lost lock and writes nothing while b holds it.
	eventually(t, func() bool { return a.Ping(ctx) != nil })
	for i := range 5 {
		err := a.AppendReceipt(ctx, okReceipt(fmt.Sprintf("a-fenced-%d", i)))
		if errcode.CodeOf(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "chain lock") {
			t.Fatalf("append %d by the Store that lost its chain lock: %v, want audit_unavailable naming the chain lock", i, err)
		}
	}
	// Nor does it resolve approvals (whose events it could not record).
	if _, err := a.ResolveApproval(ctx, "acme", "apr_none", store.Resolution{Status: store.ApprovalApproved, By: "bob", At: time.Now()}); errcode.CodeOf(err) != errcode.AuditUnavailable {
		t.Fatalf("resolving an approval through the Store that lost its chain lock: %v, want audit_unavailable", err)
	}
	if err := b.AppendReceipt(ctx, okReceipt("b2")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = nil
	// The lock is free: a takes it again and continues the stored chain.
	eventually(t, func() bool { return a.AppendReceipt(ctx, okReceipt("a2")) == nil })
	var buf bytes.Buffer
	if err := a.ExportReceipts(ctx, &buf, a.ChainID(), 0); err != nil {
		t.Fatal(err)
	}
	rep, err := receipt.Verify(&buf, a.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		t.Fatalf("the chain after the takeover and back: %v", err)
	}
	if rep.Receipts != 4 {
		t.Errorf("%d receipts, want 4 (a1, b1, b2, a2)", rep.Receipts)
	}
}

// eventually polls cond, with a deadline of a minute.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}
