-- 0002_retention: what retention pruning must remember.
--
-- run_heads keeps, for each run some of whose events were pruned, the
-- highest sequence pruned, so that a run's sequence stays monotonic when
-- every stored event of it is gone (the writer takes the next sequence
-- from MAX(events.seq, run_heads.last_seq)).
CREATE TABLE run_heads (
	tenant   TEXT    NOT NULL,
	run_id   TEXT    NOT NULL,
	last_seq INTEGER NOT NULL,
	PRIMARY KEY (tenant, run_id)
);
