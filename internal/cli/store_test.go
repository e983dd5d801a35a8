package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

// The store commands read what a gateway on the SQLite store wrote.
func TestStoreCommands(t *testing.T) {
	dir := t.TempDir()
	db, keyFile := filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key")
	cfgFile := writeFile(t, "c.yaml", "store: {driver: sqlite, dsn: "+db+"}\nsigning: {key_file: "+keyFile+"}\n")
	key, _, err := receipt.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(writeFile(t, "p.yaml", "policy: {rules: [{id: all, effect: allow, tools: ['*']}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: cfg.Policy, SigningKey: key, Events: store.EventLog(st), Receipts: store.ReceiptLog(st)})
	if err != nil {
		t.Fatal(err)
	}
	gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:a.b", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead},
		func(context.Context, json.RawMessage) (any, error) { return 1, nil })
	for i := 0; i < 3; i++ {
		if _, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:a.b", Principal: toolgate.Principal{ID: "al", Tenant: "acme"}, RunID: "r1"}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

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
