-- 0006_tool_pins: tool-definition pins (config pinning, issue 17 §3).
--
-- One row per tool (tool_id, the canonical toolId): body is the store.Pin
-- as JSON (the approved digest and definition, and the pending change:
-- old/new digest, changed fields, first seen). Replicas share it, so a
-- hold and an approval are the same on every replica after its next
-- listing.
CREATE TABLE tool_pins (
	tool_id    TEXT COLLATE "C" PRIMARY KEY,
	server     TEXT NOT NULL,
	body       TEXT NOT NULL, -- JSON; TEXT keeps the definitions byte for byte
	updated_at TIMESTAMPTZ NOT NULL
);
