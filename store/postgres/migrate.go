package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// migrate applies the embedded migrations the database lacks, in version
// order, in one transaction that first takes an advisory lock keyed by the
// current schema (so that replicas starting together serialise here and
// the second one finds everything applied), and records each in
// schema_migrations (version, name, applied_at). It returns the versions
// it applied. Errors: InvalidConfig for a version this build does not
// know; AuditUnavailable if a statement fails (nothing is applied then).
func migrate(ctx context.Context, pool *pgxpool.Pool) (applied []int, err error) {
	ms, err := store.LoadMigrations(migrationFS)
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
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, store.Unavailable("migrate: apply "+m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", m.Version, m.Name, now); err != nil {
			return nil, store.Unavailable("migrate: record "+m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, store.Unavailable("migrate: commit", err)
	}
	return applied, nil
}
