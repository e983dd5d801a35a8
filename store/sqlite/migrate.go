package sqlite

import (
	"context"
	"database/sql"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// migration is one numbered schema step, migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads every migrations/NNNN_name.sql of fsys, sorted by
// version. Numbers must be unique and positive.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "load migrations")
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, rest, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == "" {
			return nil, errcode.Errorf(errcode.Internal, "load migrations: %s is not named NNNN_name.sql", base)
		}
		body, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "load migrations")
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, errcode.Errorf(errcode.Internal, "load migrations: version %d is used twice", ms[i].version)
		}
	}
	return ms, nil
}

// migrate applies the migrations of fsys that conn's database lacks, in
// version order, all in one IMMEDIATE transaction that also records each in
// schema_migrations (version, name, applied_at). It returns the versions it
// applied (none when the schema is current). Errors: InvalidConfig if the
// database records a version this build does not have (a newer toolgate
// wrote it); AuditUnavailable if a statement fails (nothing is applied
// then).
func migrate(ctx context.Context, conn *sql.Conn, fsys fs.FS) (applied []int, err error) {
	ms, err := loadMigrations(fsys)
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
		known[m.version] = true
	}
	for v := range have {
		if !known[v] {
			return nil, errcode.Errorf(errcode.InvalidConfig, "migrate: the database has schema version %d, which this toolgate does not know (written by a newer version?)", v)
		}
	}
	now := fmtTime(time.Now())
	for _, m := range ms {
		if have[m.version] {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return nil, store.Unavailable("migrate: apply "+m.name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", m.version, m.name, now); err != nil {
			return nil, store.Unavailable("migrate: record "+m.name, err)
		}
		applied = append(applied, m.version)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, store.Unavailable("migrate: commit", err)
	}
	return applied, nil
}
