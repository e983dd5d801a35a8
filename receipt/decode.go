package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// wireReceipt is the JSON shape of a receipt line. Decoding it rejects
// unknown fields; Verify additionally requires the line to be byte-identical
// to its canonical re-encoding, which rejects duplicate keys, keys in another
// letter case, missing required keys, empty optional keys, nulls, whitespace
// and any escape other than the canonical one.
type wireReceipt struct {
	AgentID           string    `json:"agentId"`
	ApprovalID        string    `json:"approvalId"`
	CallID            string    `json:"callId"`
	ChainID           string    `json:"chainId"`
	Decision          Decision  `json:"decision"`
	DurationMs        *int64    `json:"durationMs"`
	Error             *ErrorRef `json:"error"`
	ExecutedArgsHash  string    `json:"executedArgsHash"`
	Hash              string    `json:"hash"`
	MutationSource    string    `json:"mutationSource"`
	ParentCallID      string    `json:"parentCallId"`
	PrevHash          string    `json:"prevHash"`
	Principal         string    `json:"principal"`
	ReceiptID         string    `json:"receiptId"`
	RequestedArgsHash string    `json:"requestedArgsHash"`
	ResultHash        string    `json:"resultHash"`
	RunID             string    `json:"runId"`
	Seq               uint64    `json:"seq"`
	Sig               string    `json:"sig"`
	StartedAt         string    `json:"startedAt"`
	Status            string    `json:"status"`
	Tenant            string    `json:"tenant"`
	ToolDigest        string    `json:"toolDigest"`
	ToolID            string    `json:"toolId"`
	Transport         string    `json:"transport"`
	V                 int       `json:"v"`
}

type wireCheckpoint struct {
	ChainID  string `json:"chainId"`
	Hash     string `json:"hash"`
	Seq      uint64 `json:"seq"`
	SignedAt string `json:"signedAt"`
	V        int    `json:"v"`
}

type wireCheckpointLine struct {
	Checkpoint *wireCheckpoint `json:"checkpoint"`
	Sig        string          `json:"sig"`
}

// decodeStrict decodes exactly one JSON value from data into v, rejecting
// unknown fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func parseTime(name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 time", name, s)
	}
	return t.UTC(), nil
}

func (w *wireReceipt) receipt() (*Receipt, error) {
	t, err := parseTime("startedAt", w.StartedAt)
	if err != nil {
		return nil, err
	}
	return &Receipt{
		V: w.V, ChainID: w.ChainID, Seq: w.Seq, PrevHash: w.PrevHash, ReceiptID: w.ReceiptID,
		CallID: w.CallID, ParentCallID: w.ParentCallID, RunID: w.RunID, AgentID: w.AgentID,
		Principal: w.Principal, Tenant: w.Tenant, ToolID: w.ToolID, Transport: w.Transport,
		Decision: w.Decision, RequestedArgsHash: w.RequestedArgsHash, ExecutedArgsHash: w.ExecutedArgsHash,
		MutationSource: w.MutationSource, Status: w.Status, Error: w.Error, ResultHash: w.ResultHash,
		StartedAt: t, DurationMs: w.DurationMs, ApprovalID: w.ApprovalID, ToolDigest: w.ToolDigest, Hash: w.Hash, Sig: w.Sig,
	}, nil
}

func (w *wireCheckpointLine) checkpoint() (*Checkpoint, error) {
	t, err := parseTime("signedAt", w.Checkpoint.SignedAt)
	if err != nil {
		return nil, err
	}
	c := w.Checkpoint
	return &Checkpoint{V: c.V, ChainID: c.ChainID, Seq: c.Seq, Hash: c.Hash, SignedAt: t, Sig: w.Sig}, nil
}

func decodeCheckpointLine(data []byte) (*wireCheckpointLine, error) {
	var w wireCheckpointLine
	if err := decodeStrict(data, &w); err != nil {
		return nil, err
	}
	if w.Checkpoint == nil {
		return nil, errors.New(`missing "checkpoint" object`)
	}
	return &w, nil
}

// UnmarshalJSON decodes a receipt from its JSON object form. Unknown fields
// are an error; startedAt must be an RFC 3339 time. It does not check the
// hash, the signature or the §F rules (Verify does).
//
// Errors: errcode.InvalidArgument for any decoding failure.
func (r *Receipt) UnmarshalJSON(data []byte) error {
	var w wireReceipt
	if err := decodeStrict(data, &w); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "receipt: decode")
	}
	rec, err := w.receipt()
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "receipt: decode")
	}
	*r = *rec
	return nil
}

// UnmarshalJSON decodes a checkpoint from its line form
// {"checkpoint":{…},"sig":"…"}. Unknown fields are an error. It does not
// check the signature (VerifyCheckpoint does).
//
// Errors: errcode.InvalidArgument for any decoding failure.
func (cp *Checkpoint) UnmarshalJSON(data []byte) error {
	w, err := decodeCheckpointLine(data)
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "receipt: decode checkpoint")
	}
	c, err := w.checkpoint()
	if err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "receipt: decode checkpoint")
	}
	*cp = *c
	return nil
}

func validUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
