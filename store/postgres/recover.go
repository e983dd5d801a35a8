package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// OpenCalls returns the agent.toolCalled events that this Store's replica
// wrote (events.chain_id = the signer's key id, migration 0004) and that no
// agent.toolReturned answers (by causation id), of every tenant, in
// position order: the calls a previous run of this replica left open when
// it stopped without finishing them (kill -9, a crash). The calls of other
// replicas (other signing keys), which may still be running, are never
// returned, nor are events stored before migration 0004 (an empty chain_id).
//
// Call it at start, before this Store's gateway serves calls
// (pipeline.Pipeline.CloseInterrupted): it cannot tell this replica's
// running calls from interrupted ones. It relies on each live replica
// having its own key. Errors: InvalidArgument for a Store opened with
// NoReceipts and no Signer (it writes under no chain id); AuditUnavailable
// if the server cannot be reached or the Store is closed; Cancelled,
// Timeout if ctx ends first.
func (s *Store) OpenCalls(ctx context.Context) ([]audit.Event, error) {
	const op = "open calls"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	if s.signer == nil {
		return nil, errcode.New(errcode.InvalidArgument, op+": a Store without a signer (NoReceipts) has no calls of its own")
	}
	recs, err := s.queryRecords(ctx, op, `SELECT `+eventCols+` FROM events c
		WHERE c.type = $1 AND c.chain_id = $2 AND NOT EXISTS (
			SELECT 1 FROM events r WHERE r.type = $3 AND r.causation_id = c.event_id)
		ORDER BY c.pos`, audit.TypeToolCalled, s.signer.KeyID(), audit.TypeToolReturned)
	if err != nil {
		return nil, err
	}
	out := make([]audit.Event, len(recs))
	for i := range recs {
		out[i] = recs[i].Event
	}
	return out, nil
}

// Ping checks within ctx that the database answers (a round trip on a
// pooled connection), for readiness probes. Errors: AuditUnavailable if it
// does not, if the Store lost its chain lock (it writes nothing until it
// holds it again), or the Store is closed; Cancelled, Timeout if ctx ends
// first.
// Safe for concurrent use.
func (s *Store) Ping(ctx context.Context) error {
	const op = "ping postgres store"
	if err := s.readable(ctx, op); err != nil {
		return err
	}
	if err := s.guard.lostErr(); err != nil {
		return err // it writes nothing while its chain lock is lost
	}
	return store.Unavailable(op, s.pool.Ping(ctx))
}

// Ping connects to the PostgreSQL database dsn (as Open accepts it) and
// checks that it answers, within ctx, without touching the schema: what
// `toolgate validate` checks. Errors: InvalidArgument for a malformed dsn;
// InvalidConfig when its search_path names no existing schema (the tables
// could not be created); AuditUnavailable if the server cannot be
// reached; Cancelled, Timeout if
// ctx ends first. The error never holds the dsn's password (pgx names the
// host, user and database only).
func Ping(ctx context.Context, dsn string) error {
	const op = "ping postgres"
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors may quote the dsn: do not wrap them.
		return errcode.New(errcode.InvalidArgument, op+": malformed dsn").WithDetails(map[string]any{"field": "dsn"})
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return store.Unavailable(op, err)
	}
	defer conn.Close(context.Background())
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return store.Unavailable(op, err)
	}
	if schema == nil {
		return errNoSchema()
	}
	return nil
}

// errNoSchema is the InvalidConfig error of a DSN whose search_path names
// no existing schema (PostgreSQL: "no schema has been selected to create
// in").
func errNoSchema() error {
	return errcode.New(errcode.InvalidConfig, "the DSN's search_path names no existing schema: create it (CREATE SCHEMA name) or fix search_path").
		WithDetails(map[string]any{"field": "dsn"})
}
