-- 0002_feed: a commit-ordered feed for followers on several replicas.
--
-- events.pos is assigned at insert, not at commit, so a reader following
-- pos skips rows that commit late. Instead, every transaction that
-- inserts events takes the next batch number from feed_head as its last
-- statement before COMMIT and records it in feed with its transaction id.
-- feed_head's row lock is held until the commit, so batch numbers commit
-- in order, without gaps (a rolled-back transaction gives its number
-- back): a reader that sees batch N sees every batch before it.
-- Followers read (feed.seq, events.pos) order, joining on xid.

-- xid is the inserting transaction's id (the default, so inserts need not
-- name it). Existing events all get this migration's id and form batch 1.
-- events_by_xid serves the followers' join; events_by_pos served only the
-- followers of pos, and goes (one index per event either way).
ALTER TABLE events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_by_xid ON events (xid, tenant, pos);
DROP INDEX events_by_pos;

-- One row per committed transaction that inserted events.
CREATE TABLE feed (
	seq BIGINT PRIMARY KEY,
	xid xid8   NOT NULL UNIQUE
);

-- The last batch number handed out (one row).
CREATE TABLE feed_head (
	one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
	seq BIGINT  NOT NULL
);

INSERT INTO feed (seq, xid) SELECT 1, pg_current_xact_id() WHERE EXISTS (SELECT 1 FROM events);
INSERT INTO feed_head (seq) SELECT count(*) FROM feed;
