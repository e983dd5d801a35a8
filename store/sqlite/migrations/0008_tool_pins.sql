-- 0008_tool_pins: tool-definition pins (config pinning, issue 17 §3).
--
-- One row per tool (tool_id, the canonical toolId): body is the store.Pin
-- as JSON (the approved digest and definition, and the pending change:
-- old/new digest, changed fields, first seen). server is kept beside it
-- for reading by server.
CREATE TABLE tool_pins (
	tool_id    TEXT PRIMARY KEY,
	server     TEXT NOT NULL,
	body       TEXT NOT NULL,
	updated_at TEXT NOT NULL
);
