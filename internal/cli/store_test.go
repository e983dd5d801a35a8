package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

// The store commands read what a gateway on the SQLite store wrote.
func TestStoreCommands(t *testing.T) {
	r := newStoreRig(t, nil)
	r.calls(t, 3, "r1")
	r.st.Close()
	cfgFile, keyFile, gw := r.cfgFile, r.keyFile, r.gw

	code, out, errOut := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "acme", "--run", "r1")
	if code != ExitOK || strings.Count(out, "\n") != 6 || !strings.Contains(out, `"agent.toolCalled"`) {
		t.Fatalf("audit tail: %d %q %q", code, out, errOut)
	}
	if code, out, _ := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "other"); code != ExitOK || out != "" {
		t.Fatalf("other tenant sees %q", out)
	}
	code, out, errOut = run(t, "", "receipts", "export", "--config", cfgFile)
	if code != ExitOK || !strings.Contains(out, `"checkpoint"`) {
		t.Fatalf("export: %d %q", code, errOut)
	}
	exported := writeFile(t, "r.jsonl", out)
	pub := writeFile(t, "k.pub", string(receipt.EncodePublicKey(gw.PublicKey())))
	if code, out, errOut := run(t, "", "receipts", "verify", exported, "--pubkey", pub); code != ExitOK || !strings.Contains(out, "OK: 3 receipts") {
		t.Fatalf("verify file: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK: 3 receipts") {
		t.Fatalf("verify in place: %d %q %q", code, out, errOut)
	}
	// A receipt forged onto the head (hash recomputed, linked to the head)
	// is covered by no signature: the store refuses to sign it on open, and
	// verify, export and serve all fail on it.
	forgeReceipt(t, r.dbFile, r.st.ChainID())
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitFailure || out != "" ||
		!strings.Contains(errOut, "verification FAILED") || !strings.Contains(errOut, "(seq 3) is not covered by a signed checkpoint") {
		t.Fatalf("verify in place after a forgery: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "export", "--config", cfgFile); code != ExitFailure || strings.Count(out, `"receiptId"`) != 3 ||
		!strings.Contains(errOut, "not covered by a signed checkpoint") {
		t.Fatalf("export after a forgery: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "serve", "--config", cfgFile, "--listen", "127.0.0.1:0"); code != ExitFailure || !strings.Contains(errOut, "not covered by a signed checkpoint") {
		t.Fatalf("serve after a forgery: %d %q", code, errOut)
	}
	os.Remove(keyFile)
	if code, _, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitFailure || !strings.Contains(errOut, "signing key") {
		t.Fatalf("missing key: %d %q", code, errOut)
	}
}

// audit prune removes old events and receipts; the chain still verifies in
// place and from an export.
func TestAuditPrune(t *testing.T) {
	old := func() time.Time { return time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) }
	r := newStoreRig(t, old)
	r.calls(t, 3, "r1")
	r.st.Close()
	cfgFile := r.cfgFile

	if code, _, errOut := run(t, "", "audit", "prune", "--config", cfgFile); code != ExitUsage || !strings.Contains(errOut, "audit.retention") {
		t.Fatalf("prune without a retention: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", "audit", "prune", "--config", cfgFile, "--older-than", "-3d"); code != ExitUsage || !strings.Contains(errOut, "older-than") {
		t.Fatalf("prune --older-than -3d: %d %q", code, errOut)
	}
	// --dry-run previews exactly what the prune then removes, and changes
	// nothing on disk.
	files := func() map[string]string {
		m := map[string]string{}
		ents, err := os.ReadDir(filepath.Dir(r.dbFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(r.dbFile), e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[e.Name()] = string(b)
		}
		return m
	}
	disk := files()
	code, out, errOut := run(t, "", "audit", "prune", "--config", cfgFile, "--older-than", "90d", "--dry-run")
	var plan struct {
		DryRun bool `json:"dryRun"`
		sqlite.PrunePlan
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &plan) != nil || !plan.DryRun || plan.Events.Count != 6 ||
		plan.Events.Oldest == nil || !plan.Events.Oldest.Equal(old()) || !plan.Events.Newest.Equal(old()) ||
		plan.Receipts.Count != 2 || plan.Receipts.FromSeq == nil || *plan.Receipts.FromSeq != 0 || *plan.Receipts.ToSeq != 1 ||
		plan.Receipts.Oldest == nil || plan.Checkpoints != 1 || plan.Anchor == nil || plan.Anchor.Seq != 1 {
		t.Fatalf("prune --dry-run: %d %q %q; want 6 events, receipts 0..1, 1 checkpoint, anchor at seq 1", code, out, errOut)
	}
	if after := files(); !reflect.DeepEqual(after, disk) {
		t.Fatal("prune --dry-run changed the store's directory")
	}
	if code, out, _ := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "acme"); code != ExitOK || strings.Count(out, "\n") != 6 {
		t.Fatalf("tail after a dry run: %d, %d events; want the 6 still there", code, strings.Count(out, "\n"))
	}
	code, out, errOut = run(t, "", "audit", "prune", "--config", cfgFile, "--older-than", "90d")
	var res store.PruneResult
	if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil || res.Events != 6 || res.Receipts != 2 || res.Anchor == nil || res.Anchor.Seq != 1 {
		t.Fatalf("prune: %d %q %q; want 6 events and receipts 0..1 pruned, anchor at seq 1", code, out, errOut)
	}
	if res.Checkpoints != plan.Checkpoints || res.Anchor.Hash != plan.Anchor.Hash {
		t.Fatalf("prune %+v differs from its dry run %+v", res, plan.PrunePlan)
	}
	// After the prune, a dry run has nothing left to remove and shows the
	// anchor the chain now starts from.
	code, out, errOut = run(t, "", "audit", "prune", "--config", cfgFile, "--older-than", "90d", "--dry-run")
	plan.PrunePlan = sqlite.PrunePlan{}
	if code != ExitOK || json.Unmarshal([]byte(out), &plan) != nil || plan.Events.Count != 0 || plan.Receipts.Count != 0 ||
		plan.Checkpoints != 0 || plan.Anchor == nil || plan.Anchor.Seq != 1 {
		t.Fatalf("dry run after prune: %d %q %q; want nothing to remove and the anchor at seq 1", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "acme"); code != ExitOK || out != "" {
		t.Fatalf("tail after prune: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK: 1 receipts") {
		t.Fatalf("verify in place after prune: %d %q %q", code, out, errOut)
	}
}

// receipts pubkey prints the keys that verify an export (the store's, as
// "CHAIN_ID KEY" lines; --local: the config's key as PEM); an export from
// a seq verifies with --from, with either form.
func TestReceiptsPubkeyAndFrom(t *testing.T) {
	r := newStoreRig(t, nil)
	r.calls(t, 4, "")
	r.st.Close()
	cfgFile := r.cfgFile
	code, pem, errOut := run(t, "", "receipts", "pubkey", "--config", cfgFile, "--local")
	if code != ExitOK || !strings.Contains(pem, "PUBLIC KEY") {
		t.Fatalf("pubkey --local: %d %q %q", code, pem, errOut)
	}
	if code, k, errOut := run(t, "", "receipts", "pubkey", "--key-file", r.keyFile); code != ExitOK || k != pem {
		t.Fatalf("pubkey --key-file: %d %q %q, want %q", code, k, errOut, pem)
	}
	if code, _, _ := run(t, "", "receipts", "pubkey"); code != ExitUsage {
		t.Fatalf("pubkey without --config or --key-file: exit %d, want %d", code, ExitUsage)
	}
	code, pub, errOut := run(t, "", "receipts", "pubkey", "--config", cfgFile)
	if want := r.st.ChainID() + " "; code != ExitOK || !strings.HasPrefix(pub, want) || strings.Count(pub, "\n") != 1 {
		t.Fatalf("pubkey: %d %q %q, want one line starting %q", code, pub, errOut, want)
	}
	pubFile := writeFile(t, "k.pub", pub)
	pemFile := writeFile(t, "k.pem", pem)
	_, out, _ := run(t, "", "receipts", "export", "--config", cfgFile, "--from", "2")
	exported := writeFile(t, "r2.jsonl", out)
	for _, kf := range []string{pubFile, pemFile} {
		if code, out, errOut := run(t, "", "receipts", "verify", exported, "--pubkey", kf, "--from", "2"); code != ExitOK || !strings.Contains(out, "OK: 2 receipts") {
			t.Fatalf("verify --from 2 --pubkey %s: %d %q %q", kf, code, out, errOut)
		}
	}
	if code, _, errOut := run(t, "", "receipts", "verify", exported, "--pubkey", pubFile); code != ExitFailure ||
		!strings.Contains(errOut, "pass --from with the file's first seq") || strings.Contains(errOut, "set From") {
		t.Fatalf("verify of a suffix without --from: exit %d %q, want 1 and a hint naming --from", code, errOut)
	}
}

// storeRig is a gateway with one native tool (native:a.b) on a SQLite store
// in a temporary directory, and a config file naming that store and key.
type storeRig struct {
	cfgFile, keyFile, dbFile string
	gw                       *toolgate.Gateway
	st                       *sqlite.Store
}

// newStoreRig opens the rig; now, when non-nil, is the clock of the
// gateway and of the store's checkpoints.
func newStoreRig(t *testing.T, now func() time.Time) *storeRig {
	t.Helper()
	dir := t.TempDir()
	db, keyFile := filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key")
	r := &storeRig{keyFile: keyFile, dbFile: db, cfgFile: writeFile(t, "c.yaml", "store: {driver: sqlite, dsn: "+db+"}\nsigning: {key_file: "+keyFile+"}\n")}
	key, _, err := receipt.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if r.st, err = sqlite.Open(context.Background(), db, sqlite.Options{Signer: receipt.NewSigner(key), Now: now}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(writeFile(t, "p.yaml", "policy: {rules: [{id: all, effect: allow, tools: ['*']}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.gw, err = toolgate.New(toolgate.Options{Policy: cfg.Policy, SigningKey: key, Events: store.EventLog(r.st), Receipts: store.ReceiptLog(r.st), Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := r.gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:a.b", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead},
		func(context.Context, json.RawMessage) (any, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	return r
}

// forgeReceipt appends to the database at path, behind the store's back, a
// receipt that links to chain's head with its hash recomputed, as someone
// editing the file would (no key is needed for that, only for signing).
func forgeReceipt(t *testing.T, path, chain string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var body []byte
	if err := db.QueryRow("SELECT body FROM receipts WHERE chain_id = ? ORDER BY seq DESC LIMIT 1", chain).Scan(&body); err != nil {
		t.Fatal(err)
	}
	head := new(receipt.Receipt)
	if err := head.UnmarshalJSON(body); err != nil {
		t.Fatal(err)
	}
	forged := *head
	forged.Seq, forged.PrevHash, forged.Sig = head.Seq+1, head.Hash, ""
	forged.ReceiptID, forged.CallID, forged.Principal = "rcpt_forged", "call_forged", "mallory"
	if forged.Hash, err = receipt.Hash(&forged); err != nil {
		t.Fatal(err)
	}
	fb, err := forged.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO receipts (chain_id, seq, receipt_id, tenant, body) VALUES (?, ?, ?, ?, ?)",
		chain, int64(forged.Seq), forged.ReceiptID, forged.Tenant, fb); err != nil {
		t.Fatal(err)
	}
}

// calls makes n calls of native:a.b in run runID ("" generates one each).
func (r *storeRig) calls(t *testing.T, n int, runID string) {
	t.Helper()
	for range n {
		if _, err := r.gw.Call(context.Background(), toolgate.Call{Tool: "native:a.b", Principal: toolgate.Principal{ID: "al", Tenant: "acme"}, RunID: runID}); err != nil {
			t.Fatal(err)
		}
	}
}

// A receipt deleted from the middle of the store fails verify in place
// with the missing seq named (not as an internal read error).
func TestVerifyInPlaceReportsGap(t *testing.T) {
	r := newStoreRig(t, nil)
	r.calls(t, 3, "r1")
	r.st.Close()
	db, err := sql.Open("sqlite", r.dbFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM receipts WHERE seq = 1"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, out, errOut := run(t, "", "receipts", "verify", "--config", r.cfgFile)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "verification FAILED") || !strings.Contains(errOut, "receipt seq 1 is missing") {
		t.Fatalf("verify with a gap: %d %q %q", code, out, errOut)
	}
	// The start of the chain deleted looks like a prune, except that a
	// prune also deletes the checkpoints below its anchor.
	if db, err = sql.Open("sqlite", r.dbFile); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM receipts WHERE seq = 0"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, out, errOut = run(t, "", "receipts", "verify", "--config", r.cfgFile)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "receipts 0 to 1 are missing from the store while checkpoint 0 remains") {
		t.Fatalf("verify with the start deleted: %d %q %q", code, out, errOut)
	}
}

// Issue 14 point 7 on SQLite: after a key rotation the file holds two
// chains; `receipts verify --config` verifies both (the old one with the
// key the store recorded), and a chain whose key is not recorded (a store
// written before keys were) fails until --keys gives it.
func TestReceiptsVerifySQLiteKeyRotation(t *testing.T) {
	r := newStoreRig(t, nil)
	r.calls(t, 2, "")
	oldChain := r.st.ChainID()
	r.st.Close()
	_, oldKeys, _ := run(t, "", "receipts", "pubkey", "--config", r.cfgFile)
	oldKeysFile := writeFile(t, "old.keys", oldKeys)
	if err := os.Remove(r.keyFile); err != nil {
		t.Fatal(err)
	}
	key, _, err := receipt.LoadOrCreateKey(r.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), r.dbFile, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AppendReceipt(context.Background(), testReceipt("new", "acme", "run_new")); err != nil {
		t.Fatal(err)
	}
	newChain := st.ChainID()
	st.Close()
	code, out, errOut := run(t, "", "receipts", "verify", "--config", r.cfgFile)
	if code != ExitOK || !strings.Contains(out, "OK: 3 receipts") || !strings.Contains(out, "in 2 chain(s)") ||
		!strings.Contains(out, "chain "+oldChain+": verified; 2 receipts") || !strings.Contains(out, "key: recorded in the store") ||
		!strings.Contains(out, "chain "+newChain+": verified; 1 receipts") || !strings.Contains(out, "key: the config's signing key") {
		t.Fatalf("verify after rotation: %d %q %q", code, out, errOut)
	}
	db, err := sql.Open("sqlite", r.dbFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM chain_keys WHERE chain_id = ?", oldChain); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, _, errOut = run(t, "", "receipts", "verify", "--config", r.cfgFile)
	if code != ExitFailure || !strings.Contains(errOut, "chain "+oldChain+": FAILED: no public key is known for this chain") {
		t.Fatalf("verify without the old key: %d %q", code, errOut)
	}
	code, out, errOut = run(t, "", "receipts", "verify", "--config", r.cfgFile, "--keys", oldKeysFile)
	if code != ExitOK || !strings.Contains(out, "key: from --keys") {
		t.Fatalf("verify --keys: %d %q %q", code, out, errOut)
	}
}
