package receipt

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/toolgate/toolgate/errcode"
)

// Stable VerifyError reasons. Reasons starting "failure honesty: " name the
// CONTRACT.md §F rule that failed (for example "failure honesty: error with
// status ok"); the others are exactly these phrases.
const (
	ReasonMalformed    = "malformed"                                 // a line does not parse, is not canonical, or breaks a format rule
	ReasonBadSignature = "bad signature"                             // a signature does not verify, or chainId is not a trusted key's id
	ReasonBrokenChain  = "broken chain"                              // prevHash is not the hash of the previous receipt
	ReasonGap          = "gap"                                       // a seq is missing
	ReasonReorder      = "reorder"                                   // a seq (or a checkpoint) appears before one that precedes it
	ReasonFork         = "fork"                                      // two different receipts (or a signed head) for the same seq
	ReasonDuplicate    = "duplicate"                                 // the same receipt appears twice
	ReasonHashMismatch = "body hash mismatch"                        // hash is not the SHA-256 of the canonical body
	ReasonUncovered    = "not covered by a signature"                // no checkpoint or receipt sig at or after this seq
	ReasonArgsMismatch = "args hash mismatch without mutationSource" // requestedArgsHash != executedArgsHash, no mutationSource
)

// Kinds of line a VerifyError is about.
const (
	KindReceipt    = "receipt"
	KindCheckpoint = "checkpoint"
	KindLine       = "line" // a line that did not parse far enough to have a seq
)

// VerifyError is the first verification failure Verify found.
//
// Seq is the chain position the failure is attributed to. For a receipt
// line it is the seq the chain expects at that line (the previous receipt's
// seq + 1, which is the line's own seq unless that is what was tampered
// with); for a fork or duplicate it is the repeated seq, and for a receipt
// of an unknown chain the seq it claims. For a checkpoint line it is the seq
// of the receipt whose hash the checkpoint carries, or else the seq it
// claims. Line is the 1-based line number.
type VerifyError struct {
	Kind   string `json:"kind"` // KindReceipt, KindCheckpoint or KindLine (Seq is then unset)
	Seq    uint64 `json:"seq"`
	Line   int    `json:"line"`
	Reason string `json:"reason"`           // one of the Reason* phrases or "failure honesty: …"
	Detail string `json:"detail,omitempty"` // human context; not stable
}

// Error returns "receipt seq 12 (line 14): body hash mismatch", followed by
// " (detail)" when there is a detail; a line without a seq reads
// "line 14: malformed (detail)".
func (e *VerifyError) Error() string {
	var s string
	if e.Kind == KindLine {
		s = fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	} else {
		s = fmt.Sprintf("%s seq %d (line %d): %s", e.Kind, e.Seq, e.Line, e.Reason)
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// VerifyOptions configures Verify. The zero value verifies complete chains.
type VerifyOptions struct {
	// From is the seq the stream starts at for chains that do not open with
	// a checkpoint line: when non-zero, each such chain's first receipt must
	// have seq From and its prevHash is trusted (it links to receipts not in
	// the stream). A chain that opens with a checkpoint line starts right
	// after it, anchored by its signed hash, whatever From says.
	From uint64
	// Keys are further trusted public keys (for example other replicas' keys
	// when verifying merged chains); each key's chain is identified by its
	// key id. pub and Keys together must hold at least one key.
	Keys []ed25519.PublicKey
	// MaxLineBytes bounds a line's length; 0 means 1 MiB.
	MaxLineBytes int
}

// Report describes a verified stream. Chains and Heads are sorted by chain id.
type Report struct {
	Receipts    int         `json:"receipts"`
	Checkpoints int         `json:"checkpoints"`
	Chains      []string    `json:"chains"`
	Heads       []ChainHead `json:"heads"`
	Graph       *CallGraph  `json:"graph"`
}

// ChainHead summarises one chain of a verified stream.
type ChainHead struct {
	ChainID  string `json:"chainId"`
	Receipts int    `json:"receipts"`
	First    uint64 `json:"first"` // seq of the chain's first receipt in the stream
	Seq      uint64 `json:"seq"`   // seq of its last receipt
	Hash     string `json:"hash"`  // hash of its last receipt
	// Signed is the highest seq covered by a valid signature (a checkpoint
	// or a receipt's own sig); after a successful Verify it is Seq.
	Signed uint64 `json:"signed"`
}

// Verify reads a receipts stream (JSON Lines of receipts and checkpoints, as
// Writer writes them) and checks it offline against the trusted key pub (and
// opts.Keys), following DESIGN.md §Receipts:
//
//   - every line is the canonical (RFC 8785) form of a receipt or checkpoint
//     with known fields only, v = 1, and a chainId that is the key id of a
//     trusted key;
//   - each receipt's hash is the SHA-256 of its canonical body;
//   - per chain, seqs run 0, 1, 2, … (or from opts.From, or from just after
//     an opening checkpoint) with each prevHash equal to the previous hash:
//     no gap, no fork, no reorder, no duplicate;
//   - each receipt passes the rules Chain.Append enforces (required fields,
//     enums, the args-hash rule, failure honesty per CONTRACT.md §F);
//   - each checkpoint's signature verifies, and it references a receipt
//     earlier in the stream with the same hash (a checkpoint before any
//     receipt of its chain anchors the chain instead);
//   - each receipt's own sig, when present, verifies;
//   - every receipt is covered by a signature: a checkpoint at or after its
//     seq, or its own sig or a later receipt's sig (a signature over a hash
//     covers, through prevHash, every receipt before it).
//
// It returns the report and nil on success. On the first failure it returns
// a *VerifyError and the report of what was read so far (Graph is nil then).
// A read error of r is returned wrapped (errors.Is/As reach it), and
// errcode.InvalidArgument when no trusted key is given. Lines are streamed;
// Verify keeps a few hundred bytes per receipt (its hash and its call-graph
// node). Safe for concurrent use.
func Verify(r io.Reader, pub ed25519.PublicKey, opts VerifyOptions) (*Report, error) {
	v := &verifier{opts: opts, chains: map[string]*chainState{}}
	for _, k := range append([]ed25519.PublicKey{pub}, opts.Keys...) {
		if len(k) == 0 {
			continue
		}
		id := KeyID(k)
		if id == "" {
			return &Report{}, errcode.New(errcode.InvalidArgument, "receipt: verify: a public key is not 32 bytes")
		}
		v.chains[id] = &chainState{id: id, pub: k}
	}
	if len(v.chains) == 0 {
		return &Report{}, errcode.New(errcode.InvalidArgument, "receipt: verify: no public key")
	}
	maxLine := opts.MaxLineBytes
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	v.sc = bufio.NewScanner(r)
	v.sc.Buffer(make([]byte, 0, 4096), maxLine)
	v.sc.Split(splitLines)

	verr, err := v.run()
	rep := v.report()
	if err != nil {
		return rep, err
	}
	if verr != nil {
		return rep, verr
	}
	rep.Graph = v.graph.build()
	return rep, nil
}

// entry is what the verifier keeps per receipt.
type entry struct {
	sum  [32]byte
	line int
}

type chainState struct {
	id         string
	pub        ed25519.PublicKey
	started    bool // a receipt of this chain was seen
	first      uint64
	next       uint64 // expected seq of the next receipt, once started
	head       string
	entries    []entry // entries[i] is seq first+i
	anchored   bool    // a checkpoint opened the chain
	anchorSeq  uint64
	anchorHash string
	signed     uint64 // highest seq covered by a signature
	hasSigned  bool
}

// expected returns the seq the chain expects for its next receipt.
func (c *chainState) expected(from uint64) uint64 {
	switch {
	case c.started:
		return c.next
	case c.anchored:
		return c.anchorSeq + 1
	default:
		return from
	}
}

func (c *chainState) entry(seq uint64) (entry, bool) {
	if !c.started || seq < c.first || seq >= c.next {
		return entry{}, false
	}
	return c.entries[seq-c.first], true
}

func (c *chainState) cover(seq uint64) {
	if !c.hasSigned || seq > c.signed {
		c.signed, c.hasSigned = seq, true
	}
}

type verifier struct {
	opts        VerifyOptions
	sc          *bufio.Scanner
	line        int
	chains      map[string]*chainState
	receipts    int
	checkpoints int
	graph       graphBuilder
	buf         []byte
}

var checkpointPrefix = []byte(`{"checkpoint":`)

func (v *verifier) run() (*VerifyError, error) {
	for v.sc.Scan() {
		v.line++
		line := v.sc.Bytes()
		var verr *VerifyError
		switch {
		case len(line) == 0:
			verr = v.lineErr("empty line")
		case line[0] != '{':
			verr = v.lineErr("not a JSON object (a receipt or a checkpoint)")
		case bytes.HasPrefix(line, checkpointPrefix):
			verr = v.checkpointLine(line)
		default:
			verr = v.receiptLine(line)
		}
		if verr != nil {
			return verr, nil
		}
	}
	if err := v.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &VerifyError{Kind: KindLine, Line: v.line + 1, Reason: ReasonMalformed, Detail: "line too long"}, nil
		}
		return nil, fmt.Errorf("receipt: verify: read after line %d: %w", v.line, err)
	}
	// Coverage: report the earliest uncovered receipt of any chain.
	var worst *VerifyError
	for _, c := range v.chains {
		if !c.started || (c.hasSigned && c.signed >= c.next-1) {
			continue
		}
		seq := c.first
		if c.hasSigned && c.signed >= c.first {
			seq = c.signed + 1
		}
		e, _ := c.entry(seq)
		if worst == nil || e.line < worst.Line {
			worst = &VerifyError{Kind: KindReceipt, Seq: seq, Line: e.line, Reason: ReasonUncovered,
				Detail: "no later checkpoint or receipt signature covers it"}
		}
	}
	return worst, nil
}

func (v *verifier) lineErr(detail string) *VerifyError {
	return &VerifyError{Kind: KindLine, Line: v.line, Reason: ReasonMalformed, Detail: detail}
}

func (v *verifier) fail(kind string, seq uint64, reason, detail string) *VerifyError {
	return &VerifyError{Kind: kind, Seq: seq, Line: v.line, Reason: reason, Detail: detail}
}

func (v *verifier) receiptLine(line []byte) *VerifyError {
	var w wireReceipt
	if err := decodeStrict(line, &w); err != nil {
		return v.lineErr(err.Error())
	}
	c := v.chains[w.ChainID]
	if c == nil {
		return v.fail(KindReceipt, w.Seq, ReasonBadSignature,
			fmt.Sprintf("chainId %q is not the key id of a trusted public key", w.ChainID))
	}
	pos := c.expected(v.opts.From)
	rfail := func(reason, detail string) *VerifyError { return v.fail(KindReceipt, pos, reason, detail) }
	r, err := w.receipt()
	if err != nil {
		return rfail(ReasonMalformed, err.Error())
	}
	if r.V != Version {
		return rfail(ReasonMalformed, fmt.Sprintf("unsupported version %d", r.V))
	}
	if r.Seq > MaxSafeInteger {
		return rfail(ReasonMalformed, "seq is above 2^53−1")
	}
	if r.DurationMs != nil && (*r.DurationMs < 0 || *r.DurationMs > MaxSafeInteger) {
		return rfail(ReasonMalformed, "durationMs is outside 0…2^53−1")
	}
	v.buf = appendReceipt(v.buf[:0], r, true, nil)
	if !bytes.Equal(v.buf, line) {
		return rfail(ReasonMalformed, "the line is not in canonical form (RFC 8785)")
	}
	sum := bodyHash(v.buf, r)
	if !hashEquals(r.Hash, sum) {
		return rfail(ReasonHashMismatch, "")
	}

	// Continuity. The body hash is sound, so the line's own seq is trusted.
	switch seq := r.Seq; {
	case seq == pos:
		var want string
		switch {
		case c.started:
			want = c.head
		case c.anchored:
			want = c.anchorHash
		case v.opts.From == 0:
			want = ZeroHash
		default: // the first receipt of a suffix: its prevHash is trusted
			if !isHex64(r.PrevHash) {
				return rfail(ReasonMalformed, "prevHash is not 64 lowercase hex characters")
			}
			want = r.PrevHash
		}
		if r.PrevHash != want {
			return rfail(ReasonBrokenChain, "prevHash is not the hash of the previous receipt")
		}
	case seq < pos:
		if e, ok := c.entry(seq); ok {
			if e.sum == sum {
				return v.fail(KindReceipt, seq, ReasonDuplicate, fmt.Sprintf("the receipt at line %d appears again", e.line))
			}
			return v.fail(KindReceipt, seq, ReasonFork, fmt.Sprintf("line %d has a different receipt with this seq", e.line))
		}
		return rfail(ReasonReorder, fmt.Sprintf("the line has seq %d, before the chain's expected seq %d", seq, pos))
	default:
		return v.missing(c, w.ChainID, pos, seq)
	}

	if p := checkContent(r); p != nil {
		return rfail(p.reason, p.detail)
	}
	if r.Sig != "" {
		if !verifySig(c.pub, []byte(r.Hash), r.Sig) {
			return rfail(ReasonBadSignature, "the receipt's sig does not verify")
		}
		c.cover(r.Seq)
	}
	if !c.started {
		c.started, c.first = true, r.Seq
	}
	c.entries = append(c.entries, entry{sum: sum, line: v.line})
	c.next, c.head = r.Seq+1, r.Hash
	v.receipts++
	r.ChainID = c.id // share one string across the graph's nodes
	v.graph.add(r)
	return nil
}

// missing reports a receipt line whose seq is above the expected pos: a
// reorder if a receipt with seq pos comes later in the stream, else a gap.
func (v *verifier) missing(c *chainState, chainID string, pos, got uint64) *VerifyError {
	line := v.line
	if later, ok := v.findLater(chainID, pos); ok {
		return &VerifyError{Kind: KindReceipt, Seq: pos, Line: line, Reason: ReasonReorder,
			Detail: fmt.Sprintf("the line has seq %d; seq %d comes later, at line %d", got, pos, later)}
	}
	detail := fmt.Sprintf("seq %d is missing; the line has seq %d", pos, got)
	if !c.started && !c.anchored && v.opts.From == 0 {
		detail += "; to verify a suffix, set From or start the stream with a checkpoint"
	}
	return &VerifyError{Kind: KindReceipt, Seq: pos, Line: line, Reason: ReasonGap, Detail: detail}
}

// findLater reads the rest of the stream for a receipt of chainID with seq,
// returning its line number. It consumes the stream (verification stops at
// the failure it classifies).
func (v *verifier) findLater(chainID string, seq uint64) (int, bool) {
	n := v.line
	for v.sc.Scan() {
		n++
		line := v.sc.Bytes()
		if bytes.HasPrefix(line, checkpointPrefix) {
			continue
		}
		var w struct {
			ChainID string `json:"chainId"`
			Seq     uint64 `json:"seq"`
		}
		if json.Unmarshal(line, &w) == nil && w.ChainID == chainID && w.Seq == seq {
			return n, true
		}
	}
	return 0, false
}

func (v *verifier) checkpointLine(line []byte) *VerifyError {
	w, err := decodeCheckpointLine(line)
	if err != nil {
		return v.lineErr(err.Error())
	}
	wc := w.Checkpoint
	c := v.chains[wc.ChainID]
	if c == nil {
		return v.fail(KindCheckpoint, wc.Seq, ReasonBadSignature,
			fmt.Sprintf("chainId %q is not the key id of a trusted public key", wc.ChainID))
	}
	pos := attribute(c, wc.Seq, wc.Hash)
	cfail := func(reason, detail string) *VerifyError { return v.fail(KindCheckpoint, pos, reason, detail) }
	cp, err := w.checkpoint()
	if err != nil {
		return cfail(ReasonMalformed, err.Error())
	}
	if cp.V != Version {
		return cfail(ReasonMalformed, fmt.Sprintf("unsupported version %d", cp.V))
	}
	if cp.Seq > MaxSafeInteger {
		return cfail(ReasonMalformed, "seq is above 2^53−1")
	}
	v.buf = appendCheckpointLine(v.buf[:0], cp)
	if !bytes.Equal(v.buf, line) {
		return cfail(ReasonMalformed, "the line is not in canonical form (RFC 8785)")
	}
	if !verifySig(c.pub, appendCheckpointBody(v.buf[:0], cp), cp.Sig) {
		return cfail(ReasonBadSignature, "the checkpoint's sig does not verify")
	}
	switch {
	case !c.started: // an opening checkpoint anchors the chain
		if !isHex64(cp.Hash) {
			return cfail(ReasonMalformed, "hash is not 64 lowercase hex characters")
		}
		if cp.Seq >= MaxSafeInteger {
			return cfail(ReasonMalformed, "an opening checkpoint must leave room for a next seq")
		}
		c.anchored, c.anchorSeq, c.anchorHash = true, cp.Seq, cp.Hash
		c.cover(cp.Seq)
	case cp.Seq < c.first:
		return cfail(ReasonMalformed, fmt.Sprintf("it references seq %d, before the chain's first receipt in the stream (seq %d)", cp.Seq, c.first))
	case cp.Seq >= c.next:
		if later, ok := v.findLater(wc.ChainID, cp.Seq); ok {
			return cfail(ReasonReorder, fmt.Sprintf("it precedes the receipt it signs (line %d)", later))
		}
		return cfail(ReasonGap, fmt.Sprintf("it signs seq %d but the chain ends at seq %d", cp.Seq, c.next-1))
	default:
		e, _ := c.entry(cp.Seq)
		if !hashEquals(cp.Hash, e.sum) {
			return cfail(ReasonFork, fmt.Sprintf("it signs a different hash than the receipt at line %d", e.line))
		}
		c.cover(cp.Seq)
	}
	v.checkpoints++
	return nil
}

// attribute returns the seq a checkpoint is about: the seq of the receipt
// whose hash it carries (so a tampered seq is still reported at the right
// place), or else the seq it claims.
func attribute(c *chainState, seq uint64, h string) uint64 {
	if e, ok := c.entry(seq); ok && hashEquals(h, e.sum) {
		return seq
	}
	var sum [32]byte
	if len(h) != 64 {
		return seq
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return seq
	}
	for i := range c.entries {
		if c.entries[i].sum == sum {
			return c.first + uint64(i)
		}
	}
	return seq
}

// hashEquals reports whether h is the lowercase hex of sum.
func hashEquals(h string, sum [32]byte) bool {
	if len(h) != 64 {
		return false
	}
	for i, b := range sum {
		if h[2*i] != hexDigits[b>>4] || h[2*i+1] != hexDigits[b&0xf] {
			return false
		}
	}
	return true
}

func (v *verifier) report() *Report {
	rep := &Report{Receipts: v.receipts, Checkpoints: v.checkpoints, Chains: []string{}, Heads: []ChainHead{}}
	for id, c := range v.chains {
		if !c.started && !c.anchored {
			continue
		}
		rep.Chains = append(rep.Chains, id)
	}
	sort.Strings(rep.Chains)
	for _, id := range rep.Chains {
		c := v.chains[id]
		h := ChainHead{ChainID: id, Receipts: len(c.entries), Signed: c.signed}
		if c.started {
			h.First, h.Seq, h.Hash = c.first, c.next-1, c.head
		}
		rep.Heads = append(rep.Heads, h)
	}
	return rep
}

// splitLines splits on '\n' only: unlike bufio.ScanLines it keeps a '\r',
// which then fails the canonical-form check instead of being ignored.
func splitLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// VerifyCheckpoint checks cp's version and its Ed25519 signature with pub,
// and that cp.ChainID is pub's key id. It does not look at any receipt.
//
// Errors: errcode.InvalidArgument naming the failure ("bad signature" or
// "malformed"). Safe for concurrent use.
func VerifyCheckpoint(cp *Checkpoint, pub ed25519.PublicKey) error {
	if cp == nil {
		return errcode.New(errcode.InvalidArgument, "receipt: nil checkpoint")
	}
	if p := checkCheckpointEncodable(cp); p != nil {
		return errcode.New(errcode.InvalidArgument, "receipt: checkpoint: "+p.String())
	}
	if cp.V != Version {
		return errcode.Errorf(errcode.InvalidArgument, "receipt: checkpoint: %s (version %d)", ReasonMalformed, cp.V)
	}
	if KeyID(pub) == "" || cp.ChainID != KeyID(pub) {
		return errcode.Errorf(errcode.InvalidArgument, "receipt: checkpoint: %s (chainId %q is not the key id of the public key)", ReasonBadSignature, cp.ChainID)
	}
	if !verifySig(pub, appendCheckpointBody(nil, cp), cp.Sig) {
		return errcode.New(errcode.InvalidArgument, "receipt: checkpoint: "+ReasonBadSignature)
	}
	return nil
}
