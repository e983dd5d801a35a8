package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// BenchmarkSQLiteFloor measures what SQLite alone costs per tools/call when
// it holds the call's rows, without the store's writer, journal or chain
// (issue 15: is there a SQLite layout whose per-call cost fits the CPU
// budget?). One op is one call: two event rows (agent.toolCalled,
// agent.toolReturned; 350-byte payloads, as the load tool's echo calls
// write) and one receipt (900 bytes), inserted into one open transaction
// committed every 100 ms, as the journaled writer does, and copied into the
// database file by a PASSIVE checkpoint every 250 ms (the checkpointer's
// interval; here on the same goroutine, so its cost is in ns/op). calls=N puts N
// calls' events in one multi-row INSERT (the writer's group commit).
//
// Layouts: "schema" is the store's own schema (its migrations) with the
// writer's statements; "no-indexes" drops every index but the primary keys
// (events by pos, receipts WITHOUT ROWID by chain and seq), which no query
// could live with; "one-blob" is one row per group holding its calls'
// bytes, the least SQLite can be asked to keep. One goroutine: ns/op is CPU
// per call. Run each sub-benchmark in its own process (-test.bench
// 'BenchmarkSQLiteFloor/schema/calls=16$'): run one after the other in one
// process, the later ones measured 2–4× slower (issue 15 in BENCHMARKS.md).
func BenchmarkSQLiteFloor(b *testing.B) {
	payload := []byte(strings.Repeat("x", 350))
	body := []byte(strings.Repeat("r", 900))
	for _, layout := range []string{"schema", "no-indexes", "one-blob"} {
		for _, calls := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/calls=%d", layout, calls), func(b *testing.B) {
				benchFloor(b, layout, calls, payload, body)
			})
		}
	}
}

func benchFloor(b *testing.B, layout string, calls int, payload, body []byte) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "floor.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-32768)&_pragma=temp_store(MEMORY)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	switch layout {
	case "schema":
		if _, err := migrate(ctx, conn, migrationFS); err != nil {
			b.Fatal(err)
		}
	case "no-indexes":
		_, err = conn.ExecContext(ctx, `CREATE TABLE events (pos INTEGER PRIMARY KEY, event_id TEXT NOT NULL, tenant TEXT NOT NULL,
			run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, ts TEXT NOT NULL, causation_id TEXT NOT NULL,
			schema_version INTEGER NOT NULL, payload BLOB NOT NULL, principal TEXT NOT NULL);
			CREATE TABLE receipts (chain_id TEXT NOT NULL, seq INTEGER NOT NULL, receipt_id TEXT NOT NULL, tenant TEXT NOT NULL,
			body BLOB NOT NULL, PRIMARY KEY (chain_id, seq)) WITHOUT ROWID`)
	case "one-blob":
		_, err = conn.ExecContext(ctx, `CREATE TABLE groups (pos INTEGER PRIMARY KEY, body BLOB NOT NULL)`)
	}
	if err != nil {
		b.Fatal(err)
	}
	rows := strings.Repeat("(?,?,?,?,?,?,?,?,?,?),", 2*calls)
	insEvents, err := conn.PrepareContext(ctx, "INSERT OR IGNORE INTO events ("+eventColumns+") VALUES "+rows[:len(rows)-1])
	if layout == "one-blob" {
		insEvents, err = conn.PrepareContext(ctx, "INSERT INTO groups (body) VALUES (?)")
	}
	if err != nil {
		b.Fatal(err)
	}
	insReceipt, err := conn.PrepareContext(ctx, "INSERT INTO receipts (chain_id, seq, receipt_id, tenant, body) VALUES (?, ?, ?, ?, ?)")
	if err != nil && layout != "one-blob" {
		b.Fatal(err)
	}
	group := make([]byte, calls*(2*len(payload)+len(body)))
	exec := func(q string) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	exec("BEGIN IMMEDIATE")
	since, checkpointed := time.Now(), time.Now()
	args := make([]any, 0, 20*calls)
	var rseq int64
	b.ResetTimer()
	for i := 0; i < b.N; i += calls {
		if layout == "one-blob" {
			if _, err := insEvents.Exec(group); err != nil {
				b.Fatal(err)
			}
		} else {
			args = args[:0]
			ts := fmtTime(time.Now())
			for range calls {
				run, called := "run_"+audit.NewEventID()[3:], audit.NewEventID()
				args = append(args, called, "acme", run, 0, audit.TypeToolCalled, ts, "", 1, payload, "alice",
					audit.NewEventID(), "acme", run, 1, audit.TypeToolReturned, ts, called, 1, payload, "alice")
			}
			if _, err := insEvents.Exec(args...); err != nil {
				b.Fatal(err)
			}
			for range calls {
				if _, err := insReceipt.Exec("chain", rseq, "rcpt_"+audit.NewEventID()[3:], "acme", body); err != nil {
					b.Fatal(err)
				}
				rseq++
			}
		}
		if time.Since(since) >= defaultApplyEvery {
			exec("COMMIT")
			if time.Since(checkpointed) >= checkpointInterval {
				exec("PRAGMA wal_checkpoint(PASSIVE)")
				checkpointed = time.Now()
			}
			exec("BEGIN IMMEDIATE")
			since = time.Now()
		}
	}
	exec("COMMIT")
}
