-- 0001_init: events, run heads, receipts, checkpoints, approvals, sessions.
--
-- Times are TEXT in a fixed-width RFC 3339 UTC form with nanoseconds
-- ("2006-01-02T15:04:05.000000000Z", collation "C" so that they sort as
-- times); '' is the zero time. Identifiers use collation "C" too, so that
-- orderings do not depend on the database's locale.

-- Run events. pos is the position cursors and followers resume from
-- (assigned at insert; see the package doc for what that means across
-- replicas); seq is the event's Sequence in its run (tenant, run_id).
CREATE TABLE events (
	pos            BIGSERIAL PRIMARY KEY,
	event_id       TEXT   COLLATE "C" NOT NULL UNIQUE,
	tenant         TEXT   COLLATE "C" NOT NULL,
	principal      TEXT   NOT NULL DEFAULT '',
	run_id         TEXT   COLLATE "C" NOT NULL,
	seq            BIGINT NOT NULL,
	type           TEXT   NOT NULL,
	ts             TEXT   COLLATE "C" NOT NULL,
	causation_id   TEXT   NOT NULL DEFAULT '',
	schema_version INTEGER NOT NULL DEFAULT 0,
	payload        BYTEA  NOT NULL
);
CREATE UNIQUE INDEX events_by_run ON events (tenant, run_id, seq);
CREATE INDEX events_by_time ON events (tenant, ts, pos);
CREATE INDEX events_by_pos ON events (tenant, pos);

-- run_heads holds each run's next sequence. A writer takes a run's numbers
-- by updating its row inside the transaction that inserts the events: the
-- row lock orders concurrent writers (of any replica), and a rolled-back
-- transaction gives its numbers back, so sequences have no gap.
CREATE TABLE run_heads (
	tenant   TEXT   COLLATE "C" NOT NULL,
	run_id   TEXT   COLLATE "C" NOT NULL,
	next_seq BIGINT NOT NULL,
	PRIMARY KEY (tenant, run_id)
);

-- Receipts, one hash chain per signing key. body is the receipt's
-- canonical JSON line (receipt.Receipt.MarshalJSON).
CREATE TABLE receipts (
	chain_id   TEXT   COLLATE "C" NOT NULL,
	seq        BIGINT NOT NULL,
	receipt_id TEXT   COLLATE "C" NOT NULL UNIQUE,
	tenant     TEXT   COLLATE "C" NOT NULL,
	body       BYTEA  NOT NULL,
	PRIMARY KEY (chain_id, seq)
);

-- Signed checkpoints; body is the checkpoint's canonical JSON line.
CREATE TABLE checkpoints (
	chain_id TEXT   COLLATE "C" NOT NULL,
	seq      BIGINT NOT NULL,
	body     BYTEA  NOT NULL,
	PRIMARY KEY (chain_id, seq)
);

CREATE TABLE approvals (
	id           TEXT COLLATE "C" PRIMARY KEY,
	tenant       TEXT COLLATE "C" NOT NULL,
	principal    TEXT NOT NULL,
	tool_id      TEXT NOT NULL,
	args_hash    TEXT NOT NULL,
	args_binding TEXT NOT NULL DEFAULT '',
	args_summary TEXT NOT NULL DEFAULT '',
	status       TEXT NOT NULL,
	created_at   TEXT COLLATE "C" NOT NULL,
	expires_at   TEXT NOT NULL DEFAULT '',
	resolved_by  TEXT NOT NULL DEFAULT '',
	reason       TEXT NOT NULL DEFAULT '',
	resolved_at  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_by_tenant ON approvals (tenant, status, created_at, id);

CREATE TABLE sessions (
	session_id TEXT COLLATE "C" PRIMARY KEY,
	tenant     TEXT COLLATE "C" NOT NULL,
	run_id     TEXT NOT NULL DEFAULT '',
	tool_id    TEXT NOT NULL,
	server     TEXT NOT NULL DEFAULT '',
	opened_at  TEXT NOT NULL,
	closed_at  TEXT NOT NULL DEFAULT '',
	outcome    TEXT NOT NULL DEFAULT ''
);
