package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

func pinDigest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// testPins: pins are stored, replaced, listed by toolId, and an approval
// moves the pending change to approved exactly when its digest matches.
func testPins(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ps, err := s.ListPins(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("empty store: ListPins = %v, %v", ps, err)
	}
	if _, err := s.GetPin(ctx, "mcp:a.t"); codeOf(err) != errcode.NotFound {
		t.Fatalf("GetPin unknown: %v, want not_found", err)
	}
	for _, bad := range []*store.Pin{nil, {}, {ToolID: "mcp:a.t"}, {ToolID: "mcp:a.t", Digest: "sha256:xyz", Definition: json.RawMessage(`{}`)},
		{ToolID: "mcp:a.t", Digest: pinDigest('a'), Definition: json.RawMessage(`{`)},
		{ToolID: "mcp:a.t", Digest: pinDigest('a'), Definition: json.RawMessage(`{}`), PendingDigest: pinDigest('a'), PendingDefinition: json.RawMessage(`{}`)}} {
		if err := s.PutPin(ctx, bad); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("PutPin(%+v) = %v, want invalid_argument", bad, err)
		}
	}
	a := &store.Pin{ToolID: "mcp:b.t", Server: "b", Digest: pinDigest('a'), Definition: json.RawMessage(`{"name":"t"}`), ApprovedBy: "pinning:first-sight", ApprovedAt: t0}
	if err := s.PutPin(ctx, a); err != nil {
		t.Fatal(err)
	}
	held := &store.Pin{ToolID: "mcp:a.new", Server: "a", PendingDigest: pinDigest('b'), PendingDefinition: json.RawMessage(`{"name":"new"}`),
		ChangedFields: []string{"name"}, FirstSeen: t0}
	if err := s.PutPin(ctx, held); err != nil {
		t.Fatal(err)
	}
	ps, err := s.ListPins(ctx)
	if err != nil || len(ps) != 2 || ps[0].ToolID != "mcp:a.new" || ps[1].ToolID != "mcp:b.t" {
		t.Fatalf("ListPins = %+v, %v", ps, err)
	}
	if !ps[0].Pending() || !ps[0].FirstSeen.Equal(t0) || !slices.Equal(ps[0].ChangedFields, []string{"name"}) || string(ps[0].PendingDefinition) != `{"name":"new"}` {
		t.Errorf("held pin read back as %+v", ps[0])
	}
	// A change to a pinned tool replaces the pin.
	a.PendingDigest, a.PendingDefinition, a.ChangedFields, a.FirstSeen = pinDigest('c'), json.RawMessage(`{"name":"t","description":"x"}`), []string{"description"}, t0
	if err := s.PutPin(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApprovePin(ctx, "mcp:b.t", pinDigest('d'), "ops", t0); codeOf(err) != errcode.Conflict {
		t.Fatalf("approve another digest: %v, want conflict", err)
	}
	got, err := s.ApprovePin(ctx, "mcp:b.t", pinDigest('c'), "ops", t0)
	if err != nil || got.Digest != pinDigest('c') || got.Pending() || got.ApprovedBy != "ops" || string(got.Definition) != `{"name":"t","description":"x"}` {
		t.Fatalf("ApprovePin = %+v, %v", got, err)
	}
	back, err := s.GetPin(ctx, "mcp:b.t")
	if err != nil || back.Digest != pinDigest('c') || back.Pending() || !back.ApprovedAt.Equal(t0) {
		t.Fatalf("after approval GetPin = %+v, %v", back, err)
	}
	if _, err := s.ApprovePin(ctx, "mcp:b.t", "", "ops", t0); codeOf(err) != errcode.Conflict {
		t.Fatalf("approve with nothing pending: %v, want conflict", err)
	}
	if _, err := s.ApprovePin(ctx, "mcp:zz.t", "", "ops", t0); codeOf(err) != errcode.NotFound {
		t.Fatalf("approve unknown: %v, want not_found", err)
	}
	// A new tool approved without naming the digest.
	if got, err := s.ApprovePin(ctx, "mcp:a.new", "", "ops", t0); err != nil || got.Digest != pinDigest('b') {
		t.Fatalf("approve new tool = %+v, %v", got, err)
	}
}

func codeOf(err error) errcode.Code {
	var e *errcode.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
