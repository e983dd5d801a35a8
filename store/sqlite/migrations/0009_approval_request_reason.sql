-- 0009_approval_request_reason: approvers see why a call needs approval.
--
-- request_reason is the policy's reason for asking (the require_approval
-- rule's reason, SR-1 redacted), shown by GET /v1/approvals and the
-- console next to the tool, requester and argument summary. '' for
-- approvals stored before.
ALTER TABLE approvals ADD COLUMN request_reason TEXT NOT NULL DEFAULT '';
