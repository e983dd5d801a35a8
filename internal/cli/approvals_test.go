package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

func TestApprovalsCommands(t *testing.T) {
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
	now := time.Now().UTC()
	for _, id := range []string{"apr_one", "apr_two"} {
		if err := st.CreateApproval(context.Background(), &store.Approval{ID: id, Tenant: "acme", Principal: "alice", ToolID: "mcp:fs.write_file",
			ArgsHash: strings.Repeat("ab", 32), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	code, out, errOut := run(t, "", "approvals", "list", "--config", cfgFile, "--tenant", "acme")
	if code != ExitOK || !strings.Contains(out, "apr_one") || !strings.Contains(out, "mcp:fs.write_file") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("list --tenant acme wrote to stderr: %q", errOut)
	}
	// Without --tenant the empty tenant is listed; an empty answer says so.
	if code, out, errOut := run(t, "", "approvals", "list", "--config", cfgFile); code != ExitOK || strings.Contains(out, "apr_one") || !strings.Contains(errOut, "pass --tenant") {
		t.Fatalf("list without --tenant: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "approvals", "approve", "apr_one", "--config", cfgFile, "--tenant", "acme", "--as", "bob"); code != ExitOK || !strings.HasPrefix(out, "approved apr_one") {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "approvals", "approve", "apr_one", "--config", cfgFile, "--tenant", "acme", "--as", "bob"); code != ExitFailure || !strings.Contains(errOut, "conflict") {
		t.Fatalf("approving twice: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", "approvals", "deny", "apr_two", "--config", cfgFile, "--tenant", "acme", "--as", "alice"); code != ExitFailure || !strings.Contains(errOut, "own call") {
		t.Fatalf("self-denial: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", "approvals", "deny", "apr_two", "--config", cfgFile, "--tenant", "other"); code != ExitFailure || !strings.Contains(errOut, "not_found") {
		t.Fatalf("another tenant's approval: %d %q", code, errOut)
	}
	if code, out, _ := run(t, "", "approvals", "list", "--config", cfgFile, "--tenant", "acme", "--json"); code != ExitOK || strings.Contains(out, "apr_one") || !strings.Contains(out, "apr_two") {
		t.Fatalf("list after approval: %q", out)
	}
}
