package receipt

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// Version is the format version written in the "v" field of every receipt
// and checkpoint. Verify rejects any other value.
const Version = 1

// ZeroHash is the prevHash of seq 0: 64 "0" characters.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// MaxSafeInteger is 2^53−1, the largest seq or durationMs a receipt may
// carry: RFC 8785 serialises numbers as IEEE-754 doubles, so a larger integer
// would not survive canonicalisation exactly.
const MaxSafeInteger = 1<<53 - 1

// Receipt statuses: the closed enum of OpenWOP agent.toolReturned.status
// (RFC 0064 §B, CONTRACT.md §1.4).
const (
	StatusOK          = "ok"           // the tool ran and succeeded
	StatusError       = "error"        // the tool failed, or the gateway failed the call
	StatusForbidden   = "forbidden"    // the gate refused the call; the tool never ran
	StatusRateLimited = "rate_limited" // the (principal, toolId) bucket was empty; the tool never ran
)

// Decision is the policy decision recorded in a receipt (JSON "decision").
// Effect is "allow", "deny" or "require_approval" (DESIGN.md Vocabulary);
// RuleID and PolicyVersion may be empty (they are still written, as "").
type Decision struct {
	Effect        string `json:"effect"`
	RuleID        string `json:"ruleId"`
	PolicyVersion string `json:"policyVersion"`
}

// ErrorRef is the failure discriminator of a receipt (JSON "error"): Code is
// a non-empty errcode code string (DESIGN.md decision 8). Messages are never
// stored in receipts.
type ErrorRef struct {
	Code string `json:"code"`
}

// Receipt is the signed, hash-chained record of one call's outcome
// (DESIGN.md §Receipts). JSON names are given per field; "optional" fields
// are omitted from the JSON when empty (nil for pointers).
//
// The caller sets the call fields; Chain.Append fills V, ChainID, Seq,
// PrevHash, Hash and (with Options.SignEach) Sig. MarshalJSON writes the
// canonical JSON line form (RFC 8785, including hash and sig), and
// UnmarshalJSON decodes it strictly (unknown fields are an error).
//
// A Receipt is a plain value: it is not safe to mutate concurrently with a
// call that reads it.
type Receipt struct {
	V            int    // "v": always Version (1)
	ChainID      string // "chainId": the key id of the chain's signer (see KeyID)
	Seq          uint64 // "seq": 0, 1, 2, … per chain; at most MaxSafeInteger
	PrevHash     string // "prevHash": Hash of seq−1; ZeroHash for seq 0
	ReceiptID    string // "receiptId": required
	CallID       string // "callId": required
	ParentCallID string // "parentCallId": optional; the enclosing call; never equal to CallID
	RunID        string // "runId": required
	AgentID      string // "agentId": required ("core.system" for host-initiated calls)
	Principal    string // "principal": required
	Tenant       string // "tenant": may be ""
	ToolID       string // "toolId": required, the canonical tool id
	Transport    string // "transport": "mcp", "http" or "native"
	Decision     Decision
	// RequestedArgsHash ("requestedArgsHash") and ExecutedArgsHash
	// ("executedArgsHash") are argsHash values (64 lowercase hex) of the
	// arguments as requested and as executed; when they differ,
	// MutationSource ("mutationSource", optional) must name what changed them.
	RequestedArgsHash string
	ExecutedArgsHash  string
	MutationSource    string
	Status            string    // "status": one of the Status* constants
	Error             *ErrorRef // "error": present iff Status != "ok"
	ResultHash        string    // "resultHash": optional, 64 lowercase hex
	// StartedAt ("startedAt") is written as RFC 3339 UTC with millisecond
	// precision, e.g. "2026-11-29T15:04:05.123Z"; Append truncates it to
	// the millisecond and converts it to UTC.
	StartedAt time.Time
	// DurationMs ("durationMs", integer milliseconds ≥ 0) is present iff the
	// tool ran (CONTRACT.md §F): never for "forbidden" or "rate_limited".
	DurationMs *int64
	ApprovalID string // "approvalId": optional
	// ToolDigest ("toolDigest", optional) is the definition digest of the
	// tool the call ran under (catalog.DefinitionDigest: "sha256:" and 64
	// lowercase hex); absent in receipts written before it existed, which
	// still verify.
	ToolDigest string
	// Hash ("hash") is the lowercase hex SHA-256 of the canonical body: the
	// RFC 8785 form of the receipt without "hash" and "sig".
	Hash string
	// Sig ("sig", optional) is the unpadded base64url Ed25519 signature over
	// the ASCII bytes of Hash (RFC 8032), written with Options.SignEach.
	Sig string
}

// Checkpoint is a signed chain head: its signature covers Hash at Seq and,
// because each receipt's hash covers its prevHash, every receipt of the
// chain with seq ≤ Seq. JSON line form (RFC 8785):
//
//	{"checkpoint":{"chainId":…,"hash":…,"seq":N,"signedAt":"…Z","v":1},"sig":"…"}
//
// Sig is the unpadded base64url Ed25519 signature over the canonical inner
// "checkpoint" object. SignedAt has millisecond precision, UTC.
type Checkpoint struct {
	V        int
	ChainID  string
	Seq      uint64
	Hash     string
	SignedAt time.Time
	Sig      string
}

// problem is one reason a receipt is invalid; reason is one of the stable
// VerifyError reasons.
type problem struct {
	reason string
	detail string
}

func (p *problem) String() string {
	if p.detail == "" {
		return p.reason
	}
	return p.reason + " (" + p.detail + ")"
}

func malformed(format string, args ...any) *problem {
	return &problem{reason: ReasonMalformed, detail: fmt.Sprintf(format, args...)}
}

// checkContent checks the caller-set fields of r: required fields, enums,
// hash shapes, the args-hash rule and failure honesty (CONTRACT.md §F). It
// does not look at the chain fields (v, chainId, seq, prevHash, hash, sig).
// r.StartedAt must already be UTC with millisecond precision.
func checkContent(r *Receipt) *problem {
	for _, f := range [...]struct{ name, v string }{
		{"receiptId", r.ReceiptID}, {"callId", r.CallID}, {"parentCallId", r.ParentCallID},
		{"runId", r.RunID}, {"agentId", r.AgentID}, {"principal", r.Principal}, {"tenant", r.Tenant},
		{"toolId", r.ToolID}, {"transport", r.Transport}, {"decision.effect", r.Decision.Effect},
		{"decision.ruleId", r.Decision.RuleID}, {"decision.policyVersion", r.Decision.PolicyVersion},
		{"requestedArgsHash", r.RequestedArgsHash}, {"executedArgsHash", r.ExecutedArgsHash},
		{"mutationSource", r.MutationSource}, {"status", r.Status}, {"resultHash", r.ResultHash},
		{"approvalId", r.ApprovalID}, {"toolDigest", r.ToolDigest},
	} {
		if !utf8.ValidString(f.v) {
			return malformed("%s is not valid UTF-8", f.name)
		}
	}
	if r.Error != nil && !utf8.ValidString(r.Error.Code) {
		return malformed("error.code is not valid UTF-8")
	}
	for _, f := range [...]struct{ name, v string }{
		{"receiptId", r.ReceiptID}, {"callId", r.CallID}, {"runId", r.RunID},
		{"agentId", r.AgentID}, {"principal", r.Principal}, {"toolId", r.ToolID},
	} {
		if f.v == "" {
			return malformed("%s is empty", f.name)
		}
	}
	if r.ParentCallID == r.CallID {
		return malformed("parentCallId equals callId")
	}
	switch r.Transport {
	case "mcp", "http", "native":
	default:
		return malformed("transport %q is not mcp, http or native", r.Transport)
	}
	switch r.Decision.Effect {
	case "allow", "deny", "require_approval":
	default:
		return malformed("decision.effect %q is not allow, deny or require_approval", r.Decision.Effect)
	}
	if !isHex64(r.RequestedArgsHash) {
		return malformed("requestedArgsHash is not 64 lowercase hex characters")
	}
	if !isHex64(r.ExecutedArgsHash) {
		return malformed("executedArgsHash is not 64 lowercase hex characters")
	}
	if r.ResultHash != "" && !isHex64(r.ResultHash) {
		return malformed("resultHash is not 64 lowercase hex characters")
	}
	if d, ok := strings.CutPrefix(r.ToolDigest, "sha256:"); r.ToolDigest != "" && (!ok || !isHex64(d)) {
		return malformed("toolDigest is not sha256: and 64 lowercase hex characters")
	}
	if r.StartedAt.IsZero() {
		return malformed("startedAt is missing")
	}
	if y := r.StartedAt.Year(); y < 0 || y > 9999 {
		return malformed("startedAt year %d is outside 0000–9999", y)
	}
	if r.DurationMs != nil && (*r.DurationMs < 0 || *r.DurationMs > MaxSafeInteger) {
		return malformed("durationMs %d is outside 0…2^53−1", *r.DurationMs)
	}
	switch r.Status {
	case StatusOK:
		if r.Error != nil {
			return &problem{reason: "failure honesty: error with status ok"}
		}
	case StatusError, StatusForbidden, StatusRateLimited:
		if r.Error == nil {
			return &problem{reason: "failure honesty: status " + r.Status + " without error"}
		}
		if r.Error.Code == "" {
			return &problem{reason: "failure honesty: error without code"}
		}
		if r.DurationMs != nil && r.Status != StatusError {
			return &problem{reason: "failure honesty: durationMs with status " + r.Status}
		}
	default:
		return &problem{reason: "failure honesty: unknown status", detail: fmt.Sprintf("%q", r.Status)}
	}
	if r.RequestedArgsHash != r.ExecutedArgsHash && r.MutationSource == "" {
		return &problem{reason: ReasonArgsMismatch}
	}
	return nil
}

// checkEncodable reports why r cannot be encoded canonically, or nil.
func checkEncodable(r *Receipt) *problem {
	if p := checkContentUTF8(r); p != nil {
		return p
	}
	if r.Seq > MaxSafeInteger {
		return malformed("seq %d is above 2^53−1", r.Seq)
	}
	if r.DurationMs != nil && (*r.DurationMs < 0 || *r.DurationMs > MaxSafeInteger) {
		return malformed("durationMs %d is outside 0…2^53−1", *r.DurationMs)
	}
	if y := r.StartedAt.UTC().Year(); y < 0 || y > 9999 {
		return malformed("startedAt year %d is outside 0000–9999", y)
	}
	return nil
}

func checkContentUTF8(r *Receipt) *problem {
	for _, s := range [...]string{
		r.ChainID, r.PrevHash, r.ReceiptID, r.CallID, r.ParentCallID, r.RunID, r.AgentID, r.Principal,
		r.Tenant, r.ToolID, r.Transport, r.Decision.Effect, r.Decision.RuleID, r.Decision.PolicyVersion,
		r.RequestedArgsHash, r.ExecutedArgsHash, r.MutationSource, r.Status, r.ResultHash, r.ApprovalID,
		r.ToolDigest, r.Hash, r.Sig,
	} {
		if !utf8.ValidString(s) {
			return malformed("a string field is not valid UTF-8")
		}
	}
	if r.Error != nil && !utf8.ValidString(r.Error.Code) {
		return malformed("error.code is not valid UTF-8")
	}
	return nil
}

// Hash returns the lowercase hex SHA-256 of r's canonical body: the RFC 8785
// canonical JSON of r without "hash" and "sig" (DESIGN.md §Receipts). It
// reads r's fields as they are (StartedAt is written UTC, truncated to the
// millisecond) and does not check the §F rules.
//
// Errors: errcode.InvalidArgument if r is nil, a string is not valid UTF-8,
// seq or durationMs is outside 0…2^53−1, or startedAt's year is outside
// 0000–9999. Safe for concurrent use with other readers of r.
func Hash(r *Receipt) (string, error) {
	if r == nil {
		return "", errcode.New(errcode.InvalidArgument, "receipt: nil receipt")
	}
	if p := checkEncodable(r); p != nil {
		return "", errcode.New(errcode.InvalidArgument, "receipt: "+p.String())
	}
	sum := bodyHash(nil, r)
	return string(appendHex(nil, sum[:])), nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !lowerHex[s[i]] {
			return false
		}
	}
	return true
}

// lowerHex marks the lowercase hex digits 0-9 a-f.
var lowerHex = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

// msTime returns t in UTC truncated to the millisecond.
func msTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
