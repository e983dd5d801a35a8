package receipt

import (
	"crypto/sha256"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

// Options configures a Chain. The zero value is valid.
type Options struct {
	// SignEach also signs every receipt's hash (the receipt's "sig"). Off by
	// default: an Ed25519 signature costs tens of µs, so receipts are
	// normally covered by batched checkpoints instead (see Chain.Checkpoint).
	SignEach bool
	// Now is the clock for checkpoints' signedAt; nil means time.Now.
	Now func() time.Time
}

// Chain links receipts into one hash chain and signs its checkpoints
// (DESIGN.md §Receipts). Its chainId is its signer's key id. Receipts are
// numbered 0, 1, 2, … in Append order; each receipt's prevHash is the hash
// of the one before it.
//
// A Chain lives in memory: the caller stores the receipts (see AppendWith)
// and, after a restart, continues the chain with ResumeChain. Every stored
// receipt must be covered by a later checkpoint (or its own sig), so the
// caller calls Checkpoint periodically (for example once per group commit)
// and before shutting down. Safe for concurrent use.
type Chain struct {
	signer   *Signer
	signEach bool
	now      func() time.Time
	bufs     sync.Pool // *[]byte scratch for encoding bodies

	mu        sync.Mutex
	next      uint64 // seq of the next receipt
	head      string // hash of seq next−1; "" before the first receipt
	signed    uint64 // seq of the last checkpoint
	hasSigned bool
}

// NewChain returns an empty chain (its first receipt gets seq 0) signing
// with s. It panics if s is nil (a programming error).
func NewChain(s *Signer, opts Options) *Chain {
	if s == nil {
		panic("receipt: NewChain: nil Signer")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	c := &Chain{signer: s, signEach: opts.SignEach, now: now}
	c.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	return c
}

// ResumeChain returns a chain that continues after head, the last stored
// receipt of s's chain (for example after a restart): the next receipt gets
// seq head.Seq+1 and prevHash head.Hash. A nil head yields NewChain. The
// resumed chain has no checkpoint yet, so its first Checkpoint signs the
// head even if a checkpoint for it was stored before the restart (signing
// the same head twice is harmless).
//
// Errors: errcode.InvalidArgument if head.V is not 1, head.ChainID is not
// s.KeyID(), head.Seq is above 2^53−1, or head.Hash is not the hash of
// head's body (Hash).
func ResumeChain(s *Signer, head *Receipt, opts Options) (*Chain, error) {
	c := NewChain(s, opts)
	if head == nil {
		return c, nil
	}
	if head.V != Version {
		return nil, errcode.Errorf(errcode.InvalidArgument, "receipt: resume: head has version %d, want %d", head.V, Version)
	}
	if head.ChainID != s.KeyID() {
		return nil, errcode.Errorf(errcode.InvalidArgument, "receipt: resume: head belongs to chain %q, not %q", head.ChainID, s.KeyID())
	}
	h, err := Hash(head)
	if err != nil {
		return nil, err
	}
	if h != head.Hash {
		return nil, errcode.Errorf(errcode.InvalidArgument, "receipt: resume: head seq %d: body hash mismatch", head.Seq)
	}
	c.next, c.head = head.Seq+1, head.Hash
	return c, nil
}

// ID returns the chain's id, its signer's key id.
func (c *Chain) ID() string { return c.signer.id }

// Append validates r and links it as the chain's next receipt: it sets
// r.V = 1, r.ChainID, r.Seq, r.PrevHash and r.Hash, sets r.Sig with
// Options.SignEach (and clears it otherwise), and normalises r.StartedAt to
// UTC, truncated to the millisecond. The caller sets every other field.
//
// Validation (before anything is linked, so an invalid receipt never enters
// the chain): receiptId, callId, runId, agentId, principal and toolId are
// non-empty; parentCallId differs from callId; transport is mcp, http or
// native; decision.effect is allow, deny or require_approval; the args
// hashes (and resultHash if set) are 64 lowercase hex; startedAt is set;
// durationMs is 0…2^53−1; strings are valid UTF-8; status is ok, error,
// forbidden or rate_limited; error is present iff status is not ok, with a
// non-empty code; durationMs is absent for forbidden and rate_limited
// (CONTRACT.md §F); requestedArgsHash != executedArgsHash requires
// mutationSource.
//
// Errors: *errcode.Error with code errcode.InvalidArgument naming the rule
// (the same phrase as the VerifyError reason); the chain is unchanged.
// Safe for concurrent use; the caller must not touch r during the call.
func (c *Chain) Append(r *Receipt) error { return c.AppendWith(r, nil) }

// AppendWith is Append with a commit step: after r is linked, commit(r) runs
// while the chain is locked, so commits happen one at a time in seq order
// (with SignEach, r.Sig is already set). If commit returns an error, the
// chain does not advance (the next receipt reuses r's seq), r's chain fields
// are cleared, and AppendWith returns that error unchanged. A store uses
// commit to enqueue r in its write batch, so receipts are persisted in seq
// order and a failed enqueue never leaves a gap. commit must not call back
// into the Chain. A nil commit is Append.
func (c *Chain) AppendWith(r *Receipt, commit func(*Receipt) error) error {
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "receipt: nil receipt")
	}
	r.StartedAt = msTime(r.StartedAt)
	if p := checkContent(r); p != nil {
		return errcode.New(errcode.InvalidArgument, "receipt: "+p.String()).
			WithDetails(map[string]any{"reason": p.reason})
	}
	r.V, r.ChainID, r.Seq, r.PrevHash, r.Hash, r.Sig = Version, c.signer.id, 0, ZeroHash, "", ""

	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	var off offsets
	body := appendReceipt((*bp)[:0], r, false, &off) // seq and prevHash are placeholders
	// The hashed message (body with the real seq) is built right after the
	// body in the same scratch buffer.
	if need := 2*len(body) + 20; cap(body) < need {
		body = slices.Grow(body, need-len(body))
	}
	msg := body[len(body):len(body)]
	*bp = body

	c.mu.Lock()
	seq := c.next
	if seq > MaxSafeInteger {
		c.mu.Unlock()
		return errcode.New(errcode.Internal, "receipt: the chain is full (seq above 2^53−1)")
	}
	prev := ZeroHash
	if c.head != "" {
		prev = c.head
	}
	copy(body[off.prevHash:], prev)
	msg = append(msg, body[:off.seq]...)
	msg = strconv.AppendUint(msg, seq, 10)
	msg = append(msg, body[off.seq+1:]...)
	sum := sha256.Sum256(msg)
	r.Seq, r.PrevHash, r.Hash = seq, prev, string(appendHex(msg[:0], sum[:]))
	if commit != nil {
		if c.signEach {
			r.Sig = c.signer.sign([]byte(r.Hash))
		}
		if err := commit(r); err != nil {
			r.ChainID, r.Seq, r.PrevHash, r.Hash, r.Sig = "", 0, "", "", ""
			c.mu.Unlock()
			return err
		}
	}
	c.next, c.head = seq+1, r.Hash
	c.mu.Unlock()

	if commit == nil && c.signEach {
		r.Sig = c.signer.sign([]byte(r.Hash))
	}
	return nil
}

// Checkpoint signs the chain's current head, if it moved since the last
// checkpoint, and returns it; ok is false (and cp nil) when there is no
// receipt yet or the head is already checkpointed. SignedAt is Options.Now,
// UTC, truncated to the millisecond.
//
// A checkpoint must be written after the receipt it references: when
// receipts are stored in AppendWith's commit, any checkpoint returned later
// references a stored receipt. Safe for concurrent use; signing happens
// outside the chain's lock, so it never delays Append.
func (c *Chain) Checkpoint() (cp *Checkpoint, ok bool) {
	c.mu.Lock()
	if c.head == "" || (c.hasSigned && c.signed == c.next-1) {
		c.mu.Unlock()
		return nil, false
	}
	seq, h := c.next-1, c.head
	c.signed, c.hasSigned = seq, true
	c.mu.Unlock()
	cp = &Checkpoint{V: Version, ChainID: c.signer.id, Seq: seq, Hash: h, SignedAt: msTime(c.now())}
	cp.Sig = c.signer.sign(appendCheckpointBody(make([]byte, 0, 192), cp))
	return cp, true
}

// Head returns the seq and hash of the chain's last receipt; ok is false
// before the first one. Safe for concurrent use.
func (c *Chain) Head() (seq uint64, hash string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head == "" {
		return 0, "", false
	}
	return c.next - 1, c.head, true
}
