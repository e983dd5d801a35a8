-- 0004_events_chain: which replica wrote each event, so that a replica
-- restarting after a crash closes only the calls it left open.
--
-- chain_id is the signing key id (the receipt chain id) of the Store that
-- inserted the event; '' for events stored before this migration. The
-- partial indexes serve Store.OpenCalls: this chain's agent.toolCalled
-- events, and the agent.toolReturned events that answer them (by
-- causation_id).
ALTER TABLE events ADD COLUMN chain_id TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX events_calls_by_chain ON events (chain_id, pos) WHERE type = 'agent.toolCalled';
CREATE INDEX events_returned_by_cause ON events (causation_id) WHERE type = 'agent.toolReturned';
