package cli

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/toolgate/toolgate/internal/httpapi"
)

// TestServeReceiptVerifyOverHTTP: GET /v1/receipts/{receiptId}/verify
// checks a receipt server-side with receipt.Verify (hash, link to its
// stored predecessor, a covering signature), tenant-scoped and for the
// audit scope only, without returning the neighbour receipts it read (here
// another tenant's), and reports a tampered body as a failed hash check.
func TestServeReceiptVerifyOverHTTP(t *testing.T) {
	o := startObserveServe(t)
	callAs := func(keyID, tool string) string {
		code, body := o.call(t, keyID, tool, `{}`)
		if code != 200 {
			t.Fatalf("%s %s: %d %v", keyID, tool, code, body)
		}
		return body["receiptId"].(string)
	}
	first := callAs("caller-one", "mcp:up.ok")   // seq 0
	other := callAs("auditor-two", "mcp:up.ok")  // seq 1, tenant t2
	third := callAs("caller-one", "mcp:up.fail") // seq 2, linked to t2's
	verify := func(keyID, id string) (int, httpapi.ReceiptVerification, string) {
		code, body := o.get(t, keyID, http.MethodGet, "/v1/receipts/"+id+"/verify", "")
		var v httpapi.ReceiptVerification
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("verify %s: %v: %s", id, err, body)
			}
		}
		return code, v, body
	}
	for _, c := range []struct {
		id, link string
		seq      uint64
	}{{first, "first receipt of the chain", 0}, {third, "hash of receipt seq 1", 2}} {
		code, v, body := verify("auditor-one", c.id)
		if code != 200 || !v.Verified || v.Seq != c.seq || len(v.Checks) != 3 {
			t.Fatalf("verify %s: %d %s", c.id, code, body)
		}
		for _, ck := range v.Checks {
			if !ck.Ok || ck.Skipped {
				t.Errorf("verify %s: check %+v", c.id, ck)
			}
		}
		if !strings.Contains(v.Checks[1].Detail, c.link) {
			t.Errorf("verify %s: chain link %q, want it to say %q", c.id, v.Checks[1].Detail, c.link)
		}
		if strings.Contains(body, other) || strings.Contains(body, `"t2"`) {
			t.Errorf("verify %s shows the other tenant's neighbour: %s", c.id, body)
		}
	}
	if code, _, body := verify("caller-one", first); code != http.StatusForbidden {
		t.Errorf("verify without the audit scope: %d %s", code, body)
	}
	if code, _, body := verify("auditor-two", first); code != http.StatusNotFound {
		t.Errorf("verify another tenant's receipt: %d %s", code, body)
	}

	// Tamper with the stored body of the third receipt: its hash check fails.
	db, err := sql.Open("sqlite", filepath.Join(o.dir, "toolgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE receipts SET body = replace(CAST(body AS TEXT), '"durationMs":', '"durationMs":7') WHERE receipt_id = ?`, third)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("tampering: %v (%d rows)", err, n)
	}
	code, v, body := verify("auditor-one", third)
	if code != 200 || v.Verified || v.Checks[0].Name != httpapi.CheckHash || v.Checks[0].Ok || v.Reason == "" {
		t.Fatalf("verify a tampered receipt: %d %s", code, body)
	}
}
