-- 0005_event_principal: event reads are scoped to the principal.
--
-- principal is the id of the principal an event belongs to (the call's
-- principal; an approval's requester): a principal reads its own events,
-- a holder of the audit scope every event of its tenant. '' for events
-- stored before (and events of no principal): only tenant-wide readers
-- see them.
ALTER TABLE events ADD COLUMN principal TEXT NOT NULL DEFAULT '';
