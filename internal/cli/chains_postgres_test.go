package cli

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/postgres"
)

// pgReplica is one replica's view of a shared PostgreSQL schema: its own
// signing key file, a config naming both, and (once started) its Store.
type pgReplica struct {
	cfgFile string
	chainID string
	st      *postgres.Store
}

// newPGReplica writes a key and a config for a replica on dsn; with open,
// it also opens the replica's Store (closed at cleanup).
func newPGReplica(t *testing.T, dsn, name string, open bool) *pgReplica {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, name+".key")
	priv, _, err := receipt.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	r := &pgReplica{cfgFile: writeFile(t, name+".yaml", fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %s}
`, dsn, keyFile)), chainID: receipt.NewSigner(priv).KeyID()}
	if open {
		r.st, err = postgres.Open(context.Background(), dsn, postgres.Options{Signer: receipt.NewSigner(priv)})
		if err != nil {
			t.Fatalf("open replica %s: %v", name, err)
		}
		t.Cleanup(func() { r.st.Close() })
	}
	return r
}

// testReceipt is a valid receipt of a call id.
func testReceipt(id, tenant, run string) *receipt.Receipt {
	d := int64(1)
	return &receipt.Receipt{ReceiptID: "rcpt_" + id, CallID: "call_" + id, RunID: run, AgentID: "a",
		Principal: "alice", Tenant: tenant, ToolID: "mcp:fs.read", Transport: "mcp",
		Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
		RequestedArgsHash: hex.EncodeToString(make([]byte, 32)), ExecutedArgsHash: hex.EncodeToString(make([]byte, 32)),
		Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d}
}

// calls appends n receipts (and each call's two events) of tenant to
// r's chain.
func (r *pgReplica) calls(t *testing.T, tenant, run string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("%s_%s_%d", r.chainID[8:], run, i)
		called, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(`{"n":1}`), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		called.Tenant = tenant
		if err := r.st.AppendEvents(ctx, called); err != nil {
			t.Fatal(err)
		}
		rc := testReceipt(id, tenant, run)
		returned, err := audit.NewEvent(run, audit.TypeToolReturned, json.RawMessage(`{"n":2}`), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		returned.Tenant = tenant
		if err := r.st.AppendOutcome(ctx, []*audit.Event{returned}, rc); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 14 point 7: two replicas (two Stores, two keys) write one schema;
// `receipts verify --config` (run with one replica's config, beside it)
// reports two verified chains; `receipts pubkey --config` lists both keys;
// the export of every chain verifies offline with them, and not with one
// replica's key alone; --chain exports one chain. The other store commands
// read PostgreSQL too, tenant-scoped.
func TestReceiptsVerifyPostgresTwoChains(t *testing.T) {
	dsn := postgresSchema(t)
	a := newPGReplica(t, dsn, "a", true)
	b := newPGReplica(t, dsn, "b", true)
	a.calls(t, "t1", "run_a", 3)
	b.calls(t, "t2", "run_b", 2)

	code, out, errOut := run(t, "", "receipts", "verify", "--config", a.cfgFile)
	if code != ExitOK || !strings.Contains(out, "OK: 5 receipts, 5 checkpoints in 2 chain(s), every chain verified") ||
		!strings.Contains(out, "chain "+a.chainID+": verified; 3 receipts (seq 0..2 verified), head seq 2, covered by the newest checkpoint (seq 2); key: the config's signing key") ||
		!strings.Contains(out, "chain "+b.chainID+": verified; 2 receipts (seq 0..1 verified), head seq 1, covered by the newest checkpoint (seq 1); key: recorded in the store") {
		t.Fatalf("verify --config: %d\n%s\n%s", code, out, errOut)
	}
	code, js, errOut := run(t, "", "receipts", "verify", "--config", b.cfgFile, "--json")
	var rep struct {
		OK     bool          `json:"ok"`
		Chains []chainResult `json:"chains"`
	}
	if code != ExitOK || json.Unmarshal([]byte(js), &rep) != nil || !rep.OK || len(rep.Chains) != 2 || !rep.Chains[0].Verified || !rep.Chains[1].Verified {
		t.Fatalf("verify --config --json: %d %s %s", code, js, errOut)
	}

	code, keys, errOut := run(t, "", "receipts", "pubkey", "--config", a.cfgFile)
	if code != ExitOK || strings.Count(keys, "\n") != 2 || !strings.Contains(keys, a.chainID+" ") || !strings.Contains(keys, b.chainID+" ") {
		t.Fatalf("pubkey --config: %d %q %q", code, keys, errOut)
	}
	keysFile := writeFile(t, "replicas.keys", keys)
	_, pemA, _ := run(t, "", "receipts", "pubkey", "--config", a.cfgFile, "--local")
	pemAFile := writeFile(t, "a.pub", pemA)

	code, exported, errOut := run(t, "", "receipts", "export", "--config", a.cfgFile)
	if code != ExitOK || strings.Count(exported, `"receiptId"`) != 5 {
		t.Fatalf("export: %d %q", code, errOut)
	}
	exportFile := writeFile(t, "all.jsonl", exported)
	code, out, errOut = run(t, "", "receipts", "verify", exportFile, "--pubkey", keysFile)
	if code != ExitOK || !strings.Contains(out, "OK: 5 receipts, 5 checkpoints") ||
		!strings.Contains(out, "chain "+a.chainID+": seq 0..2 (3 receipts)") || !strings.Contains(out, "chain "+b.chainID+": seq 0..1 (2 receipts)") {
		t.Fatalf("offline verify of both chains: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "receipts", "verify", exportFile, "--pubkey", pemAFile); code != ExitFailure || !strings.Contains(errOut, b.chainID) {
		t.Fatalf("offline verify with one replica's key only: %d %q", code, errOut)
	}
	code, one, errOut := run(t, "", "receipts", "export", "--config", a.cfgFile, "--chain", b.chainID)
	if code != ExitOK || strings.Count(one, `"receiptId"`) != 2 || strings.Contains(one, a.chainID) {
		t.Fatalf("export --chain: %d %q", code, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", writeFile(t, "b.jsonl", one), "--keys", keysFile); code != ExitOK || !strings.Contains(out, "OK: 2 receipts") {
		t.Fatalf("offline verify of one chain: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "receipts", "export", "--config", a.cfgFile, "--chain", "ed25519:0000000000000000"); code != ExitFailure || !strings.Contains(errOut, "no such chain") {
		t.Fatalf("export --chain unknown: %d %q", code, errOut)
	}

	// audit tail reads PostgreSQL, scoped to the tenant.
	code, out, errOut = run(t, "", "audit", "tail", "--config", a.cfgFile, "--tenant", "t2")
	if code != ExitOK || strings.Count(out, "\n") != 4 || strings.Contains(out, "run_a") {
		t.Fatalf("audit tail --tenant t2: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, "", "audit", "tail", "--config", b.cfgFile, "--tenant", "t1", "--run", "run_a")
	if code != ExitOK || strings.Count(out, "\n") != 6 || !strings.Contains(out, `"sequence":5`) {
		t.Fatalf("audit tail --run: %d %q %q", code, out, errOut)
	}
	// --follow opens the same store: it replays the tenant's stored events
	// until interrupted.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"audit", "tail", "--config", a.cfgFile, "--tenant", "t2", "--follow"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for range 4 {
		if !sc.Scan() || !strings.Contains(sc.Text(), "run_b") {
			t.Fatalf("audit tail --follow: %q %v", sc.Text(), sc.Err())
		}
	}
	cancel()
	go io.Copy(io.Discard, pr)
	<-done

	// approvals work the shared inbox.
	now := time.Now()
	if err := a.st.CreateApproval(context.Background(), &store.Approval{ID: "apr_pg", Tenant: "t1", Principal: "alice", ToolID: "mcp:fs.write",
		ArgsHash: strings.Repeat("ab", 32), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "", "approvals", "list", "--config", b.cfgFile, "--tenant", "t2"); code != ExitOK || strings.Contains(out, "apr_pg") {
		t.Fatalf("approvals list of another tenant: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "approvals", "list", "--config", b.cfgFile, "--tenant", "t1"); code != ExitOK || !strings.Contains(out, "apr_pg") {
		t.Fatalf("approvals list: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "approvals", "approve", "apr_pg", "--config", b.cfgFile, "--tenant", "t1"); code != ExitOK || !strings.Contains(out, "approved apr_pg") {
		t.Fatalf("approvals approve: %d %q %q", code, out, errOut)
	}
	if got, err := a.st.GetApproval(context.Background(), "t1", "apr_pg"); err != nil || got.Status != store.ApprovalApproved {
		t.Fatalf("approval after approve through the CLI: %+v %v", got, err)
	}
	if code, _, errOut := run(t, "", "audit", "prune", "--config", a.cfgFile, "--older-than", "1d"); code != ExitFailure || !strings.Contains(errOut, "sqlite store only") {
		t.Fatalf("audit prune on postgres: %d %q", code, errOut)
	}
}

// A receipt row changed in PostgreSQL fails its chain, and only it:
// `receipts verify --config` names the chain as FAILED with the reason,
// still reports the other as verified, and exits 1.
func TestReceiptsVerifyPostgresTampered(t *testing.T) {
	dsn := postgresSchema(t)
	a := newPGReplica(t, dsn, "a", true)
	b := newPGReplica(t, dsn, "b", true)
	a.calls(t, "t1", "run_a", 2)
	b.calls(t, "t1", "run_b", 3)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(), `UPDATE receipts SET body = convert_to(replace(convert_from(body, 'UTF8'), '"alice"', '"mallory"'), 'UTF8') WHERE chain_id = $1 AND seq = 1`, b.chainID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tamper: %v %v", tag, err)
	}
	code, out, errOut := run(t, "", "receipts", "verify", "--config", a.cfgFile)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "verification FAILED: 1 of 2 chain(s) failed") ||
		!strings.Contains(errOut, "chain "+b.chainID+": FAILED: receipt seq 1") || !strings.Contains(errOut, "hash") ||
		!strings.Contains(errOut, "chain "+a.chainID+": verified") {
		t.Fatalf("verify after tampering: %d %q %q", code, out, errOut)
	}
	t.Logf("verify after tampering:\n%s", errOut)
	// A head no checkpoint covers fails too (the sqlite store's check,
	// now on PostgreSQL).
	if _, err := conn.Exec(context.Background(), `DELETE FROM checkpoints WHERE chain_id = $1`, a.chainID); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "", "receipts", "verify", "--config", b.cfgFile)
	if code != ExitFailure || !strings.Contains(errOut, "2 of 2 chain(s) failed") ||
		!strings.Contains(errOut, "chain "+a.chainID+": FAILED: head receipt seq 1 is not covered by a signed checkpoint") {
		t.Fatalf("verify without checkpoint: %d %q", code, errOut)
	}
}

// Two `serve` replicas configured with the same signing key on one
// PostgreSQL: the second fails at start, naming the chain and saying each
// replica needs its own key; the first keeps its chain to itself. A
// replica with its own key starts beside it.
func TestServePostgresSameKeyRefused(t *testing.T) {
	dsn := postgresSchema(t)
	a := newPGReplica(t, dsn, "a", false)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errb strings.Builder
	exited := make(chan int, 1)
	go func() {
		code := Main(ctx, []string{"serve", "--config", a.cfgFile}, strings.NewReader(""), pw, &errb)
		pw.Close()
		exited <- code
	}()
	defer func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop")
		}
	}()
	sc := bufio.NewScanner(pr)
	started := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "toolgate: MCP gateway at ") {
			started = true
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if !started {
		t.Fatalf("first serve did not start; stderr: %s", errb.String())
	}
	code, _, errOut := run(t, "", "serve", "--config", a.cfgFile)
	if code != ExitFailure || !strings.Contains(errOut, "receipt chain "+a.chainID) || !strings.Contains(errOut, "each replica needs its own key") {
		t.Fatalf("second serve with the same key: %d %q", code, errOut)
	}
	t.Logf("second serve: %s", errOut)
	// The store commands still read beside it with that very config.
	if code, _, errOut := run(t, "", "receipts", "pubkey", "--config", a.cfgFile); code != ExitOK {
		t.Fatalf("pubkey beside the replica: %d %q", code, errOut)
	}
	// Another key is another chain: that replica's Store opens.
	newPGReplica(t, dsn, "b", true)
}
