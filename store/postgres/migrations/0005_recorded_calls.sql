-- 0005_recorded_calls: the content of recorded calls (issue 18, record and
-- replay), apart from the content-free events and receipts.
--
-- body is the store.RecordedCall as JSON (redacted arguments and result).
-- seq is the call's append number within its run; started_at (Unix
-- nanoseconds) orders a run's calls and is what audit.record_retention
-- prunes by.
CREATE TABLE recorded_calls (
	tenant     TEXT NOT NULL,
	call_id    TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	seq        BIGINT NOT NULL,
	started_at BIGINT NOT NULL,
	body       TEXT NOT NULL,
	PRIMARY KEY (tenant, call_id)
);
CREATE INDEX recorded_calls_by_run ON recorded_calls (tenant, run_id, started_at, seq);
CREATE INDEX recorded_calls_by_start ON recorded_calls (started_at);
