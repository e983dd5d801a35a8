package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"sort"
	"time"
)

// ChainInfo describes one receipt chain a store holds (Chains): each
// signing key that has opened the store, or signed receipts in it, has one.
type ChainInfo struct {
	// ID is the chain id (receipt.KeyID of the signing key).
	ID string `json:"chainId"`
	// PublicKey is the signing key's Ed25519 public key (32 bytes) as the
	// store recorded it when a Store first opened with that signer; nil if
	// the store has receipts of the chain but no record of its key (written
	// before keys were recorded). It proves only what the store says: to
	// detect a rewrite of the store by someone who can write to it, verify
	// with keys obtained from the replicas themselves.
	PublicKey ed25519.PublicKey `json:"publicKey,omitempty"`
	// FirstSeen is when the key was first recorded (zero if unknown).
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	// Receipts is the number of stored receipts of the chain.
	Receipts int64 `json:"receipts"`
	// HeadSeq is the seq of the newest stored receipt (meaningful when
	// Receipts > 0).
	HeadSeq uint64 `json:"headSeq"`
	// Checkpoint reports whether the chain has a stored signed checkpoint,
	// and CheckpointSeq is the seq of the newest one.
	Checkpoint    bool   `json:"checkpoint"`
	CheckpointSeq uint64 `json:"checkpointSeq"`
}

// ChainLister is implemented by stores that hold several receipt chains
// (one per signing key: several replicas, or a key rotation) and can list
// them (store/sqlite, store/postgres).
type ChainLister interface {
	// Chains returns every chain the store knows, sorted by ID: those with
	// a recorded key and those with stored receipts or checkpoints. Not
	// tenant-scoped (chains are the operator's, like ReceiptsByChain).
	// Errors: Cancelled, Timeout; AuditUnavailable; Internal for a
	// recorded key that is not 32 bytes of base64. Safe for concurrent use.
	Chains(ctx context.Context) ([]ChainInfo, error)
}

// ChainSet assembles Chains' result: backends add what their tables hold
// and take the sorted list. Not safe for concurrent use. For backend
// implementers.
type ChainSet map[string]*ChainInfo

// get returns id's entry, creating it.
func (cs ChainSet) get(id string) *ChainInfo {
	c := cs[id]
	if c == nil {
		c = &ChainInfo{ID: id}
		cs[id] = c
	}
	return c
}

// AddKey records chain id's public key (base64, standard alphabet) and
// when it was first seen. It returns false if key is not 32 bytes of
// base64.
func (cs ChainSet) AddKey(id, key string, firstSeen time.Time) bool {
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return false
	}
	c := cs.get(id)
	c.PublicKey, c.FirstSeen = raw, firstSeen
	return true
}

// AddReceipts records chain id's receipt count and newest seq.
func (cs ChainSet) AddReceipts(id string, n int64, head uint64) {
	c := cs.get(id)
	c.Receipts, c.HeadSeq = n, head
}

// AddCheckpoint records chain id's newest checkpoint seq.
func (cs ChainSet) AddCheckpoint(id string, seq uint64) {
	c := cs.get(id)
	c.Checkpoint, c.CheckpointSeq = true, seq
}

// List returns the chains sorted by ID.
func (cs ChainSet) List() []ChainInfo {
	out := make([]ChainInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EncodeKey is pub in the form ChainSet.AddKey reads (standard base64).
func EncodeKey(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }
