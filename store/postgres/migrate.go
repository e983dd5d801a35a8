package postgres

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// migrate applies the embedded migrations the database lacks, in version
// order, in one transaction that first takes an advisory lock keyed by the
// current schema (so that replicas starting together serialise here and
// the second one finds everything applied), and records each in
// schema_migrations (version, name, applied_at). It returns the versions
// it applied. Errors: InvalidConfig for a version this build does not
// know; AuditUnavailable if a statement fails (nothing is applied then).
func migrate(ctx context.Context, pool *pgxpool.Pool) (applied []int, err error) {
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return nil, err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, store.Unavailable("migrate: begin", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.Background())
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('toolgate.migrate.' || current_schema()))`); err != nil {
		return nil, store.Unavailable("migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	)`); err != nil {
		return nil, store.Unavailable("migrate: schema_migrations", err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, store.Unavailable("migrate: read versions", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, store.Unavailable("migrate: read versions", err)
	}
	have := map[int]bool{}
	for _, v := range versions {
		have[v] = true
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
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return nil, store.Unavailable("migrate: apply "+m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", m.version, m.name, now); err != nil {
			return nil, store.Unavailable("migrate: record "+m.name, err)
		}
		applied = append(applied, m.version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, store.Unavailable("migrate: commit", err)
	}
	return applied, nil
}
