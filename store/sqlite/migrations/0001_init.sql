-- 0001_init: events, receipts, checkpoints, approvals, sessions.
--
-- Times are TEXT in a fixed-width RFC 3339 UTC form with nanoseconds
-- ("2006-01-02T15:04:05.000000000Z"), so that they sort as times; '' is
-- the zero time.

-- Run events. pos is the commit order (never reused: AUTOINCREMENT), the
-- position cursors and followers resume from; seq is the event's Sequence
-- in its run (tenant, run_id).
CREATE TABLE events (
	pos            INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id       TEXT    NOT NULL UNIQUE,
	tenant         TEXT    NOT NULL,
	run_id         TEXT    NOT NULL,
	seq            INTEGER NOT NULL,
	type           TEXT    NOT NULL,
	ts             TEXT    NOT NULL,
	causation_id   TEXT    NOT NULL DEFAULT '',
	schema_version INTEGER NOT NULL DEFAULT 0,
	payload        BLOB    NOT NULL
);
CREATE UNIQUE INDEX events_by_run ON events (tenant, run_id, seq);
CREATE INDEX events_by_time ON events (tenant, ts, pos);

-- Receipts, one hash chain per signing key. body is the receipt's
-- canonical JSON line (receipt.Receipt.MarshalJSON).
CREATE TABLE receipts (
	chain_id   TEXT    NOT NULL,
	seq        INTEGER NOT NULL,
	receipt_id TEXT    NOT NULL UNIQUE,
	tenant     TEXT    NOT NULL,
	body       BLOB    NOT NULL,
	PRIMARY KEY (chain_id, seq)
);

-- Signed checkpoints; body is the checkpoint's canonical JSON line.
CREATE TABLE checkpoints (
	chain_id TEXT    NOT NULL,
	seq      INTEGER NOT NULL,
	body     BLOB    NOT NULL,
	PRIMARY KEY (chain_id, seq)
);

CREATE TABLE approvals (
	id          TEXT PRIMARY KEY,
	tenant      TEXT NOT NULL,
	principal   TEXT NOT NULL,
	tool_id     TEXT NOT NULL,
	args_hash   TEXT NOT NULL,
	status      TEXT NOT NULL,
	created_at  TEXT NOT NULL,
	expires_at  TEXT NOT NULL DEFAULT '',
	resolved_by TEXT NOT NULL DEFAULT '',
	reason      TEXT NOT NULL DEFAULT '',
	resolved_at TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_by_tenant ON approvals (tenant, status, created_at, id);

CREATE TABLE sessions (
	session_id TEXT PRIMARY KEY,
	tenant     TEXT NOT NULL,
	run_id     TEXT NOT NULL DEFAULT '',
	tool_id    TEXT NOT NULL,
	server     TEXT NOT NULL DEFAULT '',
	opened_at  TEXT NOT NULL,
	closed_at  TEXT NOT NULL DEFAULT '',
	outcome    TEXT NOT NULL DEFAULT ''
);
