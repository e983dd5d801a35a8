package store

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// Pin is the pinned definition of one tool (issue 17 §3, config pinning):
// the definition digest an operator approved (or that record mode took on
// first sight) and, while a different definition has been seen since, that
// pending change. Pins are gateway-wide, not per tenant: the servers and
// their tools are the deployment's. Times are returned in UTC. A Pin is a
// plain value; stores copy it in and out.
type Pin struct {
	ToolID string `json:"toolId"` // the canonical toolId; the key; required
	Server string `json:"server"` // the tool's server ("" for native and HTTP tools)
	// Digest and Definition are the approved definition (catalog.
	// DefinitionDigest, catalog.NormalizeDefinition); both "" / nil for a
	// tool that has never been approved (new in enforce mode).
	Digest     string          `json:"digest,omitempty"`
	Definition json.RawMessage `json:"definition,omitempty"`
	ApprovedAt time.Time       `json:"approvedAt,omitzero"`
	ApprovedBy string          `json:"approvedBy,omitempty"` // "pinning:first-sight", "pinning:record" or an operator id
	// PendingDigest and PendingDefinition are the latest definition seen
	// that differs from the approved one ("" / nil: none); ChangedFields
	// are its fields that differ (catalog.ChangedFields) and FirstSeen
	// when that digest was first seen.
	PendingDigest     string          `json:"pendingDigest,omitempty"`
	PendingDefinition json.RawMessage `json:"pendingDefinition,omitempty"`
	ChangedFields     []string        `json:"changedFields,omitempty"`
	FirstSeen         time.Time       `json:"firstSeen,omitzero"`
}

// Pending reports whether p has a pending change.
func (p *Pin) Pending() bool { return p.PendingDigest != "" }

// Validate checks a pin before it is stored: ToolID is 1–512 bytes of
// valid UTF-8; a digest is "sha256:" and 64 lowercase hex digits and comes
// with its definition (valid JSON); a pin has an approved or a pending
// digest (or both, differing). Errors: InvalidArgument with details.field.
func (p *Pin) Validate() error {
	if p == nil {
		return invalidField("pin", "pin is nil")
	}
	if p.ToolID == "" || len(p.ToolID) > 512 || !utf8.ValidString(p.ToolID) {
		return invalidField("toolId", "toolId must be 1–512 bytes of UTF-8")
	}
	if !utf8.ValidString(p.Server) || !utf8.ValidString(p.ApprovedBy) {
		return invalidField("server", "server and approvedBy must be UTF-8")
	}
	for _, f := range []struct {
		field, digest string
		def           json.RawMessage
	}{{"digest", p.Digest, p.Definition}, {"pendingDigest", p.PendingDigest, p.PendingDefinition}} {
		if f.digest == "" {
			if len(f.def) != 0 {
				return invalidField(f.field, "%s is empty but its definition is set", f.field)
			}
			continue
		}
		if !validDigest(f.digest) {
			return invalidField(f.field, "%s must be sha256:<64 lowercase hex>", f.field)
		}
		if !json.Valid(f.def) {
			return invalidField(f.field, "the definition of %s is not JSON", f.field)
		}
	}
	if p.Digest == "" && p.PendingDigest == "" {
		return invalidField("digest", "a pin needs an approved or a pending digest")
	}
	if p.Digest != "" && p.Digest == p.PendingDigest {
		return invalidField("pendingDigest", "the pending digest equals the approved one")
	}
	return nil
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Approve returns p with its pending change approved by by at at: Digest
// and Definition become the pending ones and the pending fields are
// cleared. digest, when not "", must be the pending digest (an operator
// approves what they were shown). Errors: Conflict when nothing is pending
// (details.reason "nothing_pending") or the pending digest is another
// (details.reason "digest_mismatch", details.pendingDigest);
// InvalidArgument for an empty by or a zero at.
func (p Pin) Approve(digest, by string, at time.Time) (Pin, error) {
	if by == "" || at.IsZero() {
		return Pin{}, invalidField("approvedBy", "an approval needs who and when")
	}
	if !p.Pending() {
		return Pin{}, errcode.Errorf(errcode.Conflict, "tool %s has no pending definition change", p.ToolID).
			WithDetails(map[string]any{"reason": "nothing_pending"})
	}
	if digest != "" && digest != p.PendingDigest {
		return Pin{}, errcode.Errorf(errcode.Conflict, "tool %s: the pending definition is %s, not %s", p.ToolID, p.PendingDigest, digest).
			WithDetails(map[string]any{"reason": "digest_mismatch", "pendingDigest": p.PendingDigest})
	}
	p.Digest, p.Definition = p.PendingDigest, p.PendingDefinition
	p.PendingDigest, p.PendingDefinition, p.ChangedFields, p.FirstSeen = "", nil, nil, time.Time{}
	p.ApprovedBy, p.ApprovedAt = by, at.UTC()
	return p, nil
}

// Pins keeps tool-definition pins durably, so that a restart keeps every
// hold (issue 17 §3). All methods are safe for concurrent use.
type Pins interface {
	// ListPins returns every pin, ordered by ToolID. Errors:
	// AuditUnavailable. The caller owns the result.
	ListPins(ctx context.Context) ([]Pin, error)

	// GetPin returns toolID's pin. Errors: NotFound; AuditUnavailable.
	GetPin(ctx context.Context, toolID string) (*Pin, error)

	// PutPin stores p, replacing the pin of p.ToolID if there is one.
	// Errors: InvalidArgument if p fails Pin.Validate; AuditUnavailable.
	PutPin(ctx context.Context, p *Pin) error

	// ApprovePin approves toolID's pending change atomically (Pin.Approve)
	// and returns the new pin. Errors: NotFound; those of Pin.Approve;
	// AuditUnavailable.
	ApprovePin(ctx context.Context, toolID, digest, by string, at time.Time) (*Pin, error)
}

// ClonePin returns a deep copy of p (for backends).
func ClonePin(p Pin) Pin {
	p.Definition = append(json.RawMessage(nil), p.Definition...)
	p.PendingDefinition = append(json.RawMessage(nil), p.PendingDefinition...)
	p.ChangedFields = append([]string(nil), p.ChangedFields...)
	if len(p.Definition) == 0 {
		p.Definition = nil
	}
	if len(p.PendingDefinition) == 0 {
		p.PendingDefinition = nil
	}
	if len(p.ChangedFields) == 0 {
		p.ChangedFields = nil
	}
	p.ApprovedAt, p.FirstSeen = p.ApprovedAt.UTC(), p.FirstSeen.UTC()
	return p
}

// MarshalPin is the JSON a backend stores for p: encoding/json without
// HTML escaping, so that the definitions are kept byte for byte.
func MarshalPin(p Pin) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ClonePin(p)); err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "encoding pin")
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
