-- 0006_chain_keys: the public key of every chain's signing key.
--
-- A Store that opens with a signer records its key here (once; first_seen
-- is when), so that `toolgate receipts verify --config` can verify every
-- chain of the store, and `receipts pubkey --config` list their keys.
-- public_key is the raw 32-byte Ed25519 key in standard base64.
CREATE TABLE chain_keys (
	chain_id   TEXT PRIMARY KEY,
	public_key TEXT NOT NULL,
	first_seen TEXT NOT NULL
);
