package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// errFallback makes commit apply a batch request by request: the batch
// repeats an event id across requests, which the one-statement-per-table
// path does not resolve (or a test holds the writer at beforeFeed, which
// needs a pause between the inserts and the feed number).
var errFallback = errors.New("store/postgres: batch needs per-request savepoints")

// feedStmt, the last statement of a transaction that inserted events,
// takes the next feed number (feed_head's row lock, held until the
// commit, makes numbers commit in order), records it with the
// transaction's id and notifies the followers of every replica on commit
// ($1: the events channel).
const feedStmt = `WITH h AS (UPDATE feed_head SET seq = seq + 1 RETURNING seq),
			f AS (INSERT INTO feed (seq, xid) SELECT seq, pg_current_xact_id() FROM h RETURNING seq)
			SELECT pg_notify($1, f.seq::text) FROM f`

// fastAttempt applies batch in one round trip: the run heads and events
// of every request in one statement, the receipts in another, the
// checkpoint in a third, the feed number (feedStmt) last, pipelined
// (pgx.Batch) as one implicit transaction that commits at the pipeline's
// Sync. That is the common case, where no request is refused by the
// database. A receipt that does not link (InvalidArgument) is refused in
// errs before anything is sent, with its request's events, as a savepoint
// would. Any error returned
// means nothing was committed, receipts may have been linked (the caller
// resumes the chain), and the batch must be applied by attempt instead,
// which isolates in a savepoint each request the database refuses: an
// event id already stored (an idempotent re-append or a Conflict), a
// receiptId already stored, a NUL byte. errFallback means nothing was
// sent (see errFallback).
func (w *writer) fastAttempt(batch []*request, live []bool, errs []error) error {
	if w.s.beforeFeed != nil {
		return errFallback
	}
	seen := map[string]bool{}
	for i, req := range batch {
		if !live[i] {
			continue // errs[i] says why (its ctx ended)
		}
		errs[i] = nil
		req.seqs, req.recs = nil, nil
		for _, ev := range req.events {
			if seen[ev.EventID] {
				return errFallback
			}
			seen[ev.EventID] = true
		}
	}
	var ev struct {
		eids, tenants, principals, runs, types, tss, causes []string
		schemas                                             []int32
		payloads                                            [][]byte
	}
	var rc struct {
		chains, rids, tenants []string
		seqs                  []int64
		bodies                [][]byte
	}
	ok := make([]bool, len(batch)) // live and not refused
	linked := false
	for i, req := range batch {
		if !live[i] {
			continue
		}
		if req.rcpt != nil {
			err := w.chain.AppendWith(req.rcpt, func(r *receipt.Receipt) error {
				body, err := r.MarshalJSON()
				if err != nil {
					return errcode.Wrap(errcode.InvalidArgument, err, req.op)
				}
				rc.chains, rc.seqs, rc.rids = append(rc.chains, r.ChainID), append(rc.seqs, int64(r.Seq)), append(rc.rids, r.ReceiptID)
				rc.tenants, rc.bodies = append(rc.tenants, r.Tenant), append(rc.bodies, body)
				return nil
			})
			if err != nil {
				errs[i] = err
				continue
			}
			linked = true
		}
		ok[i] = true
		for _, e := range req.events {
			ev.eids, ev.tenants, ev.principals, ev.runs = append(ev.eids, e.EventID), append(ev.tenants, e.Tenant), append(ev.principals, e.Principal), append(ev.runs, e.RunID)
			ev.types, ev.tss, ev.causes = append(ev.types, string(e.Type)), append(ev.tss, fmtTime(e.Timestamp)), append(ev.causes, e.CausationID)
			ev.schemas, ev.payloads = append(ev.schemas, int32(e.SchemaVersion)), append(ev.payloads, []byte(e.Payload))
		}
	}

	var b pgx.Batch
	if g := w.s.guard; g != nil && (len(ev.eids) > 0 || len(rc.rids) > 0) {
		b.Queue(fenceStmt, g.pid.Load())
	}
	type stored struct{ pos, seq int64 }
	got := make(map[string]stored, len(ev.eids))
	if len(ev.eids) > 0 {
		// Each run's numbers come from its run_heads row, locked in
		// (tenant, run_id) order, byte-wise as attempt locks them, so
		// that replicas rarely deadlock (and a deadlock is retried);
		// events take them in batch order, marked with the writer's
		// chain id (which replica wrote them, for OpenCalls after a
		// crash). An event id already stored fails the statement on
		// events_event_id_key.
		b.Queue(`WITH u AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::bytea[])
					WITH ORDINALITY AS u(e, t, p, r, ty, ts, c, sv, pl, ord)
			), n AS (
				SELECT t, r, count(*) AS n FROM u GROUP BY t, r
			), h AS (
				INSERT INTO run_heads (tenant, run_id, next_seq)
				SELECT t, r, n FROM n ORDER BY t COLLATE "C", r COLLATE "C"
				ON CONFLICT (tenant, run_id) DO UPDATE SET next_seq = run_heads.next_seq + EXCLUDED.next_seq
				RETURNING tenant, run_id, next_seq
			), i AS (
				INSERT INTO events (event_id, tenant, principal, run_id, seq, type, ts, causation_id, schema_version, payload, chain_id)
				SELECT u.e, u.t, u.p, u.r, h.next_seq - n.n - 1 + row_number() OVER (PARTITION BY u.t, u.r ORDER BY u.ord),
					u.ty, u.ts, u.c, u.sv, u.pl, $10
				FROM u JOIN n ON n.t = u.t AND n.r = u.r JOIN h ON h.tenant = u.t AND h.run_id = u.r
				ORDER BY u.ord
				RETURNING pos, event_id, seq
			)
			SELECT pos, event_id, seq FROM i`,
			ev.eids, ev.tenants, ev.principals, ev.runs, ev.types, ev.tss, ev.causes, ev.schemas, ev.payloads, w.s.ChainID()).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var st stored
					var id string
					if err := rows.Scan(&st.pos, &id, &st.seq); err != nil {
						return err
					}
					got[id] = st
				}
				return rows.Err()
			})
	}
	if len(rc.rids) > 0 {
		b.Queue(`INSERT INTO receipts (chain_id, seq, receipt_id, tenant, body)
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bytea[])`,
			rc.chains, rc.seqs, rc.rids, rc.tenants, rc.bodies)
	}
	if linked {
		if cp, ok := w.chain.Checkpoint(); ok {
			body, err := cp.MarshalJSON()
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO checkpoints (chain_id, seq, body) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
				cp.ChainID, int64(cp.Seq), body)
		}
	}
	if len(ev.eids) > 0 {
		b.Queue(feedStmt, w.s.lis.events)
	}
	if b.Len() > 0 {
		ctx := context.Background()
		if err := w.s.pool.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		w.commits.Add(1)
	}
	for i, req := range batch {
		if !ok[i] {
			continue
		}
		req.seqs = make([]int64, len(req.events))
		for j, e := range req.events {
			st := got[e.EventID]
			req.seqs[j] = st.seq
			rec := store.Record{Pos: st.pos, Event: *e}
			rec.Event.Sequence = st.seq
			rec.Event.Timestamp = rec.Event.Timestamp.UTC()
			rec.Event.Payload = append([]byte(nil), e.Payload...)
			req.recs = append(req.recs, rec)
		}
	}
	return nil
}
