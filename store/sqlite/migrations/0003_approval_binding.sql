-- 0003_approval_binding: approvals are bound to the exact arguments.
--
-- args_binding is the HMAC-SHA256 (hex) of the call's canonical,
-- unredacted arguments under the gateway's binding key (approval.Manager):
-- argsHash is computed over redacted arguments, so two calls differing only
-- in a secret-looking value share it. '' for approvals stored before.
ALTER TABLE approvals ADD COLUMN args_binding TEXT NOT NULL DEFAULT '';
