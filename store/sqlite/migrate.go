package sqlite

import (
	"context"
	"database/sql"
	"io/fs"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// migrate applies the migrations of fsys that conn's database lacks, in
// version order, all in one IMMEDIATE transaction that also records each in
// schema_migrations (version, name, applied_at). It returns the versions it
// applied (none when the schema is current). Errors: InvalidConfig if the
// database records a version this build does not have (a newer toolgate
// wrote it); AuditUnavailable if a statement fails (nothing is applied
// then).
func migrate(ctx context.Context, conn *sql.Conn, fsys fs.FS) (applied []int, err error) {
	ms, err := store.LoadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, store.Unavailable("migrate: begin", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	)`); err != nil {
		return nil, store.Unavailable("migrate: schema_migrations", err)
	}
	have := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, store.Unavailable("migrate: read versions", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, store.Unavailable("migrate: read versions", err)
		}
		have[v] = true
	}
	if err := rows.Close(); err != nil {
		return nil, store.Unavailable("migrate: read versions", err)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable("migrate: read versions", err)
	}
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	for v := range have {
		if !known[v] {
			return nil, errcode.Errorf(errcode.InvalidConfig, "migrate: the database has schema version %d, which this toolgate does not know (written by a newer version?)", v)
		}
	}
	now := fmtTime(time.Now())
	for _, m := range ms {
		if have[m.Version] {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return nil, store.Unavailable("migrate: apply "+m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", m.Version, m.Name, now); err != nil {
			return nil, store.Unavailable("migrate: record "+m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, store.Unavailable("migrate: commit", err)
	}
	return applied, nil
}
