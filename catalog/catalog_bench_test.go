package catalog

import (
	"fmt"
	"testing"
)

// benchSnapshot is a catalog of 1,000 MCP tools over 50 servers plus the
// fixture tools.
func benchSnapshot(b *testing.B) *Snapshot {
	b.Helper()
	tools := fixtureTools()
	for i := range 1000 {
		tools = append(tools, mcpTool(fmt.Sprintf("srv%d", i%50), fmt.Sprintf("tool_%d", i), TierRead))
	}
	s, err := NewSnapshot(tools, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkResolve(b *testing.B) {
	s := benchSnapshot(b)
	for _, name := range []string{
		"mcp:srv7.tool_507", // canonical
		"srv7.tool_507",     // server.tool
		"srv7__tool_507",    // MCP-surface name
		"tool_507",          // bare
		"mcp%3Asrv7.tool_507",
		"create_issue", // ambiguous (error path)
		"nope",         // not found (error path)
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.Resolve(name)
			}
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	s := benchSnapshot(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Lookup("mcp:srv7.tool_507"); !ok {
			b.Fatal("not found")
		}
	}
}

func BenchmarkNewSnapshot(b *testing.B) {
	tools := fixtureTools()
	for i := range 1000 {
		tools = append(tools, mcpTool(fmt.Sprintf("srv%d", i%50), fmt.Sprintf("tool_%d", i), TierRead))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewSnapshot(tools, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
