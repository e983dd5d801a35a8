-- 0003_chain_keys: the public key of every chain's signing key.
--
-- A Store that opens with a signer (a replica) records its key here once
-- (first_seen is when), so that `toolgate receipts verify --config`
-- verifies every replica's chain and `receipts pubkey --config` lists the
-- keys. public_key is the raw 32-byte Ed25519 key in standard base64.
CREATE TABLE chain_keys (
	chain_id   TEXT COLLATE "C" PRIMARY KEY,
	public_key TEXT NOT NULL,
	first_seen TEXT NOT NULL
);
