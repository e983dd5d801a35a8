package catalog

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

func TestClassify(t *testing.T) {
	rules := []Classification{
		{Match: "mcp:fs.*", SafetyTier: TierRead, Scopes: []string{"fs:read"}, ReplayPolicy: ReplayIdempotent, Egress: EgressNone},
		{Match: "mcp:fs.write_*", SafetyTier: TierWrite, Scopes: []string{"fs:write"}, Approval: ApprovalAlways},
		{Match: "mcp:fs.write_file", Title: "Write file", Description: "Writes a file.", CostHint: HintLow, LatencyHint: HintHigh},
		{Match: "mcp:gh.*", Scopes: []string{"gh:any"}},
		{Match: "native:clock.*", SafetyTier: TierPure},
		{Match: "mcp:gh.clear", Scopes: []string{}},
	}
	cases := []struct {
		name string
		in   ToolDescriptor
		want ToolDescriptor
	}{
		{
			name: "one rule",
			in:   ToolDescriptor{ToolID: "mcp:fs.read_file", Source: SourceMCP},
			want: ToolDescriptor{ToolID: "mcp:fs.read_file", Source: SourceMCP, SafetyTier: TierRead,
				Auth: &Auth{Scopes: []string{"fs:read"}}, ReplayPolicy: ReplayIdempotent, Egress: EgressNone},
		},
		{
			name: "later rules override earlier ones, scopes replace",
			in:   ToolDescriptor{ToolID: "mcp:fs.write_file", Source: SourceMCP, Title: "upstream title"},
			want: ToolDescriptor{ToolID: "mcp:fs.write_file", Source: SourceMCP, SafetyTier: TierWrite,
				Auth: &Auth{Scopes: []string{"fs:write"}}, ReplayPolicy: ReplayIdempotent, Egress: EgressNone,
				Approval: ApprovalAlways, Title: "Write file", Description: "Writes a file.", CostHint: HintLow, LatencyHint: HintHigh},
		},
		{
			name: "unclassified MCP tool is write, not its upstream guess",
			in:   ToolDescriptor{ToolID: "mcp:other.get", Source: SourceMCP, SafetyTier: TierRead},
			want: ToolDescriptor{ToolID: "mcp:other.get", Source: SourceMCP, SafetyTier: TierWrite},
		},
		{
			name: "MCP tool matched without a tier is still write",
			in:   ToolDescriptor{ToolID: "mcp:gh.list", Source: SourceMCP, SafetyTier: TierPure, Auth: &Auth{CredentialRef: true}},
			want: ToolDescriptor{ToolID: "mcp:gh.list", Source: SourceMCP, SafetyTier: TierWrite,
				Auth: &Auth{Scopes: []string{"gh:any"}, CredentialRef: true}},
		},
		{
			name: "empty non-nil scopes clear",
			in:   ToolDescriptor{ToolID: "mcp:gh.clear", Source: SourceMCP, Auth: &Auth{Scopes: []string{"x"}}},
			want: ToolDescriptor{ToolID: "mcp:gh.clear", Source: SourceMCP, SafetyTier: TierWrite},
		},
		{
			name: "native tool keeps its registered tier when unmatched",
			in:   ToolDescriptor{ToolID: "native:math.add", Source: SourceNodePack, SafetyTier: TierPure},
			want: ToolDescriptor{ToolID: "native:math.add", Source: SourceNodePack, SafetyTier: TierPure},
		},
		{
			name: "native tool classified",
			in:   ToolDescriptor{ToolID: "native:clock.now", Source: SourceNodePack, SafetyTier: TierRead},
			want: ToolDescriptor{ToolID: "native:clock.now", Source: SourceNodePack, SafetyTier: TierPure},
		},
		{
			name: "glob is on the canonical id, not a spelling",
			in:   ToolDescriptor{ToolID: "mcp:fsx.read_file", Source: SourceMCP},
			want: ToolDescriptor{ToolID: "mcp:fsx.read_file", Source: SourceMCP, SafetyTier: TierWrite},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.in
			Classify(&d, rules)
			if !reflect.DeepEqual(d, c.want) {
				a, _ := json.Marshal(d)
				b, _ := json.Marshal(c.want)
				t.Errorf("got  %s\nwant %s", a, b)
			}
		})
	}
}

func TestClassifyDoesNotAlias(t *testing.T) {
	rules := []Classification{{Match: "*", SafetyTier: TierRead, Scopes: []string{"a"}}}
	shared := &Auth{Scopes: []string{"old"}, CredentialRef: true}
	d := ToolDescriptor{ToolID: "mcp:fs.x", Source: SourceMCP, Auth: shared}
	Classify(&d, rules)
	rules[0].Scopes[0] = "mutated"
	if d.Auth.Scopes[0] != "a" {
		t.Errorf("descriptor aliases the rule's scopes: %q", d.Auth.Scopes)
	}
	if shared.Scopes[0] != "old" || len(shared.Scopes) != 1 {
		t.Errorf("Classify wrote through the descriptor's original Auth: %+v", shared)
	}
	if !d.Auth.CredentialRef {
		t.Error("credentialRef lost")
	}
	Classify(nil, rules) // no-op, no panic
}

func TestClassificationValidate(t *testing.T) {
	if err := (&Classification{Match: "mcp:fs.*", SafetyTier: TierRead, Scopes: []string{"fs:read"}}).Validate(); err != nil {
		t.Fatalf("valid entry: %v", err)
	}
	bad := Classification{SafetyTier: "admin", ReplayPolicy: "x", Approval: "x", Egress: "x",
		CostHint: "x", LatencyHint: "x", Scopes: []string{"a", "a", ""}}
	err := bad.Validate()
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) {
		t.Fatalf("Validate() = %v, want invalid_config", err)
	}
	issues, _ := errcode.As(err).Details["issues"].([]string)
	if len(issues) != 9 {
		t.Errorf("got %d issues, want 9: %q", len(issues), issues)
	}
	for _, want := range []string{"match: required", "safety_tier", "replay_policy", "approval", "egress", "cost_hint", "latency_hint", "duplicate scope", "empty scope"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
