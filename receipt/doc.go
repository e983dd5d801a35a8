// Package receipt implements toolgate's execution receipts: one signed,
// hash-chained record per tool call, verifiable offline (DESIGN.md
// §Receipts, decision 6; CONTRACT.md §2.1 §F).
//
// # Quick start
//
//	priv, _, err := receipt.LoadOrCreateKey("toolgate.key") // PEM PKCS#8, mode 0600
//	signer := receipt.NewSigner(priv)
//	chain := receipt.NewChain(signer, receipt.Options{})
//	w := receipt.NewWriter(file)
//
//	r := &receipt.Receipt{ReceiptID: …, CallID: …, Status: "ok", …}
//	err = chain.AppendWith(r, w.WriteReceipt) // validate, link, write in seq order
//	if cp, ok := chain.Checkpoint(); ok {     // e.g. once per group commit
//		err = w.WriteCheckpoint(cp)
//	}
//
//	rep, err := receipt.Verify(file, signer.PublicKey(), receipt.VerifyOptions{})
//
// # Receipts and the chain
//
// A receipt body is the JSON object
//
//	{v, chainId, seq, prevHash, receiptId, callId, parentCallId?, runId, agentId,
//	 principal, tenant, toolId, transport, decision{effect, ruleId, policyVersion},
//	 requestedArgsHash, executedArgsHash, mutationSource?, status, error{code}?,
//	 resultHash?, startedAt, durationMs?, approvalId?, toolDigest?}
//
// where "?" keys are omitted when empty. v is 1. chainId is the signer's key
// id: "ed25519:" + the first 16 lowercase hex characters of SHA-256(raw
// 32-byte public key). seq counts 0, 1, 2, … per chain. prevHash is the hash
// of seq−1, 64 zeros for seq 0. startedAt is RFC 3339 UTC with milliseconds
// ("2026-11-29T15:04:05.123Z"); durationMs is integer milliseconds. Numbers
// are at most 2^53−1.
//
// hash is the lowercase hex SHA-256 of the body's RFC 8785 canonical JSON.
// Since each body contains prevHash, a signature over one hash covers every
// receipt before it. Signing each receipt (Ed25519 costs tens of µs) would
// exceed the per-call budget, so a Chain signs checkpoints instead: a
// checkpoint signs the head hash at some seq and thereby covers every
// receipt up to it. Options.SignEach additionally signs each receipt's hash
// (its "sig").
//
// # File format (JSON Lines)
//
// A receipts file is UTF-8 text, one JSON object per line, each line ending
// in "\n" (the last newline may be missing). Each line is in RFC 8785
// canonical form (keys sorted, no whitespace), which Verify requires, so any
// change of a byte is detected. A line is either a receipt, the body plus
// "hash" and optionally "sig":
//
//	{"agentId":"a1","callId":"c1","chainId":"ed25519:3f9a0c1d2e4b5a69","decision":{…},"durationMs":12,
//	 "executedArgsHash":"…","hash":"<hex sha256 of the body>","prevHash":"…",…,"seq":0,…,"v":1}
//
// or a checkpoint:
//
//	{"checkpoint":{"chainId":"ed25519:…","hash":"<hash of receipt seq>","seq":9,
//	 "signedAt":"2026-11-29T15:04:06.000Z","v":1},"sig":"<base64url Ed25519 signature>"}
//
// Signatures are Ed25519 (RFC 8032) encoded as unpadded base64url (86
// characters). A checkpoint's sig signs the canonical bytes of its inner
// "checkpoint" object; a receipt's sig signs the ASCII bytes of its "hash".
//
// Lines appear in chain order: receipts of a chain by increasing seq, each
// checkpoint after the receipt it references. Every receipt must be covered
// by a checkpoint at or after its seq (or by its own or a later receipt's
// sig); in practice a file ends with a checkpoint of its last receipt. A
// file may hold several chains (one per gateway key) interleaved. A file
// that continues an earlier one starts with that file's last checkpoint,
// which anchors the first receipt's prevHash; VerifyOptions.From verifies a
// bare suffix instead, trusting its first prevHash.
//
// # Verification
//
// Verify checks all of the above and the rules Chain.Append enforces (the
// args-hash rule and failure honesty), reports the first failure as a
// *VerifyError with the seq, the line and a stable reason, and rebuilds the
// call graph from parentCallId (BuildGraph).
package receipt
