package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
	code, out, errOut := run(t, "", "audit", "prune", "--config", cfgFile, "--older-than", "90d")
	var res store.PruneResult
	if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil || res.Events != 6 || res.Receipts != 2 || res.Anchor == nil || res.Anchor.Seq != 1 {
		t.Fatalf("prune: %d %q %q; want 6 events and receipts 0..1 pruned, anchor at seq 1", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "acme"); code != ExitOK || out != "" {
		t.Fatalf("tail after prune: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK: 1 receipts") {
		t.Fatalf("verify in place after prune: %d %q %q", code, out, errOut)
	}
}

// receipts pubkey prints the key that verifies an export; an export from a
// seq verifies with --from.
func TestReceiptsPubkeyAndFrom(t *testing.T) {
	r := newStoreRig(t, nil)
	r.calls(t, 4, "")
	r.st.Close()
	cfgFile := r.cfgFile
	code, pub, errOut := run(t, "", "receipts", "pubkey", "--config", cfgFile)
	if code != ExitOK || !strings.Contains(pub, "PUBLIC KEY") {
		t.Fatalf("pubkey: %d %q %q", code, pub, errOut)
	}
	pubFile := writeFile(t, "k.pub", pub)
	_, out, _ := run(t, "", "receipts", "export", "--config", cfgFile, "--from", "2")
	exported := writeFile(t, "r2.jsonl", out)
	if code, out, errOut := run(t, "", "receipts", "verify", exported, "--pubkey", pubFile, "--from", "2"); code != ExitOK || !strings.Contains(out, "OK: 2 receipts") {
		t.Fatalf("verify --from 2: %d %q %q", code, out, errOut)
	}
	if code, _, _ := run(t, "", "receipts", "verify", exported, "--pubkey", pubFile); code != ExitFailure {
		t.Fatalf("verify of a suffix without --from: exit %d, want 1", code)
	}
}

// storeRig is a gateway with one native tool (native:a.b) on a SQLite store
// in a temporary directory, and a config file naming that store and key.
type storeRig struct {
	cfgFile, keyFile string
	gw               *toolgate.Gateway
	st               *sqlite.Store
}

// newStoreRig opens the rig; now, when non-nil, is the clock of the
// gateway and of the store's checkpoints.
func newStoreRig(t *testing.T, now func() time.Time) *storeRig {
	t.Helper()
	dir := t.TempDir()
	db, keyFile := filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key")
	r := &storeRig{keyFile: keyFile, cfgFile: writeFile(t, "c.yaml", "store: {driver: sqlite, dsn: "+db+"}\nsigning: {key_file: "+keyFile+"}\n")}
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

// calls makes n calls of native:a.b in run runID ("" generates one each).
func (r *storeRig) calls(t *testing.T, n int, runID string) {
	t.Helper()
	for range n {
		if _, err := r.gw.Call(context.Background(), toolgate.Call{Tool: "native:a.b", Principal: toolgate.Principal{ID: "al", Tenant: "acme"}, RunID: runID}); err != nil {
			t.Fatal(err)
		}
	}
}
