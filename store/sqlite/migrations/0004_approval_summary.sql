-- 0004_approval_summary: approvers see what they approve.
--
-- args_summary is the call's SR-1-redacted arguments as canonical JSON,
-- cut short (approval.MaxArgsSummary bytes): what GET /v1/approvals and
-- `toolgate approvals list` show next to the argsHash. '' for approvals
-- stored before.
ALTER TABLE approvals ADD COLUMN args_summary TEXT NOT NULL DEFAULT '';
