package receipt

import (
	"crypto/sha256"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
)

// This file writes receipts and checkpoints directly in RFC 8785 canonical
// form. The fields are known, all keys are ASCII (so UTF-16 code-unit order
// is byte order), and every number is an integer in 0…2^53−1 (so the ES6
// number form is the plain decimal). encode_test.go checks the output is
// byte-identical to canonjson.Canonicalize(json.Marshal(…)).

const hexDigits = "0123456789abcdef"

// timeLayout is RFC 3339 UTC with exactly three fractional digits.
const timeLayout = "2006-01-02T15:04:05.000Z"

// appendString appends s as an RFC 8785 JSON string (§3.2.2.2); s is valid
// UTF-8 (checkEncodable).
func appendString(b []byte, s string) []byte {
	return canonjson.AppendString(b, s, canonjson.Canonical)
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	t = msTime(t)
	year, month, day := t.Date()
	if year < 0 || year > 9999 { // not encodable (checkEncodable); as time formats it
		b = t.AppendFormat(b, timeLayout)
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	// timeLayout, written directly: AppendFormat interprets the layout on
	// every call.
	b = append4(b, year)
	b = append(b, '-')
	b = append2(b, int(month))
	b = append(b, '-')
	b = append2(b, day)
	b = append(b, 'T')
	b = append2(b, hour)
	b = append(b, ':')
	b = append2(b, minute)
	b = append(b, ':')
	b = append2(b, sec)
	b = append(b, '.')
	ms := t.Nanosecond() / int(time.Millisecond)
	b = append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	return append(b, 'Z', '"')
}

// append2 appends 0 <= v < 100 as two digits.
func append2(b []byte, v int) []byte { return append(b, byte('0'+v/10), byte('0'+v%10)) }

// append4 appends 0 <= v < 10000 as four digits.
func append4(b []byte, v int) []byte { return append2(append2(b, v/100), v%100) }

func appendHex(b []byte, p []byte) []byte {
	for _, c := range p {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

// offsets records where Append's placeholders sit in an encoded body.
type offsets struct {
	prevHash int // first byte of the 64-character prevHash value
	seq      int // the one-byte "0" written for seq
}

// appendReceipt appends r in canonical form. With line it is the file line
// form (body plus "hash", and "sig" when set); otherwise the body that Hash
// covers. When off is non-nil it records the placeholder offsets (Append
// encodes with PrevHash = ZeroHash and Seq = 0). r must pass checkEncodable.
//
// Key order (byte order): agentId approvalId callId chainId decision
// durationMs error executedArgsHash hash mutationSource parentCallId
// prevHash principal receiptId requestedArgsHash resultHash runId seq sig
// startedAt status tenant toolDigest toolId transport v.
func appendReceipt(b []byte, r *Receipt, line bool, off *offsets) []byte {
	b = append(b, `{"agentId":`...)
	b = appendString(b, r.AgentID)
	if r.ApprovalID != "" {
		b = append(b, `,"approvalId":`...)
		b = appendString(b, r.ApprovalID)
	}
	b = append(b, `,"callId":`...)
	b = appendString(b, r.CallID)
	b = append(b, `,"chainId":`...)
	b = appendString(b, r.ChainID)
	b = append(b, `,"decision":{"effect":`...)
	b = appendString(b, r.Decision.Effect)
	b = append(b, `,"policyVersion":`...)
	b = appendString(b, r.Decision.PolicyVersion)
	b = append(b, `,"ruleId":`...)
	b = appendString(b, r.Decision.RuleID)
	b = append(b, '}')
	if r.DurationMs != nil {
		b = append(b, `,"durationMs":`...)
		b = strconv.AppendInt(b, *r.DurationMs, 10)
	}
	if r.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = appendString(b, r.Error.Code)
		b = append(b, '}')
	}
	b = append(b, `,"executedArgsHash":`...)
	b = appendString(b, r.ExecutedArgsHash)
	if line {
		b = append(b, `,"hash":`...)
		b = appendString(b, r.Hash)
	}
	if r.MutationSource != "" {
		b = append(b, `,"mutationSource":`...)
		b = appendString(b, r.MutationSource)
	}
	if r.ParentCallID != "" {
		b = append(b, `,"parentCallId":`...)
		b = appendString(b, r.ParentCallID)
	}
	b = append(b, `,"prevHash":`...)
	if off != nil {
		off.prevHash = len(b) + 1
	}
	b = appendString(b, r.PrevHash)
	b = append(b, `,"principal":`...)
	b = appendString(b, r.Principal)
	b = append(b, `,"receiptId":`...)
	b = appendString(b, r.ReceiptID)
	b = append(b, `,"requestedArgsHash":`...)
	b = appendString(b, r.RequestedArgsHash)
	if r.ResultHash != "" {
		b = append(b, `,"resultHash":`...)
		b = appendString(b, r.ResultHash)
	}
	b = append(b, `,"runId":`...)
	b = appendString(b, r.RunID)
	b = append(b, `,"seq":`...)
	if off != nil {
		off.seq = len(b)
	}
	b = strconv.AppendUint(b, r.Seq, 10)
	if line && r.Sig != "" {
		b = append(b, `,"sig":`...)
		b = appendString(b, r.Sig)
	}
	b = append(b, `,"startedAt":`...)
	b = appendTime(b, r.StartedAt)
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	b = append(b, `,"tenant":`...)
	b = appendString(b, r.Tenant)
	if r.ToolDigest != "" {
		b = append(b, `,"toolDigest":`...)
		b = appendString(b, r.ToolDigest)
	}
	b = append(b, `,"toolId":`...)
	b = appendString(b, r.ToolID)
	b = append(b, `,"transport":`...)
	b = appendString(b, r.Transport)
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(r.V), 10)
	return append(b, '}')
}

// bodyHash returns the SHA-256 of r's canonical body, using buf as scratch.
func bodyHash(buf []byte, r *Receipt) [32]byte {
	return sha256.Sum256(appendReceipt(buf[:0], r, false, nil))
}

// appendCheckpointBody appends the canonical inner checkpoint object, the
// message its signature covers.
func appendCheckpointBody(b []byte, cp *Checkpoint) []byte {
	b = append(b, `{"chainId":`...)
	b = appendString(b, cp.ChainID)
	b = append(b, `,"hash":`...)
	b = appendString(b, cp.Hash)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, cp.Seq, 10)
	b = append(b, `,"signedAt":`...)
	b = appendTime(b, cp.SignedAt)
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(cp.V), 10)
	return append(b, '}')
}

// appendCheckpointLine appends the canonical line form of cp.
func appendCheckpointLine(b []byte, cp *Checkpoint) []byte {
	b = append(b, `{"checkpoint":`...)
	b = appendCheckpointBody(b, cp)
	b = append(b, `,"sig":`...)
	b = appendString(b, cp.Sig)
	return append(b, '}')
}

func checkCheckpointEncodable(cp *Checkpoint) *problem {
	if !validUTF8(cp.ChainID, cp.Hash, cp.Sig) {
		return malformed("a string field is not valid UTF-8")
	}
	if cp.Seq > MaxSafeInteger {
		return malformed("seq %d is above 2^53−1", cp.Seq)
	}
	if y := cp.SignedAt.UTC().Year(); y < 0 || y > 9999 {
		return malformed("signedAt year %d is outside 0000–9999", y)
	}
	return nil
}

// MarshalJSON returns the receipt's canonical JSON line form (RFC 8785, with
// "hash" and, when set, "sig"), without a trailing newline. It has a value
// receiver so a Receipt held by value in another struct marshals the same
// way. Note that json.Marshal re-escapes '<', '>', '&', U+2028 and U+2029 in
// the result, which is then no longer canonical: use Writer for receipt
// files.
//
// Errors: errcode.InvalidArgument as for Hash.
func (r Receipt) MarshalJSON() ([]byte, error) {
	if p := checkEncodable(&r); p != nil {
		return nil, errcode.New(errcode.InvalidArgument, "receipt: "+p.String())
	}
	return appendReceipt(make([]byte, 0, 768), &r, true, nil), nil
}

// MarshalJSON returns the checkpoint's canonical JSON line form
// {"checkpoint":{…},"sig":"…"}. Errors: errcode.InvalidArgument if a string
// is not valid UTF-8, seq is above 2^53−1 or signedAt's year is outside
// 0000–9999. Value receiver, as for Receipt.MarshalJSON.
func (cp Checkpoint) MarshalJSON() ([]byte, error) {
	if p := checkCheckpointEncodable(&cp); p != nil {
		return nil, errcode.New(errcode.InvalidArgument, "receipt: checkpoint "+p.String())
	}
	return appendCheckpointLine(make([]byte, 0, 256), &cp), nil
}
