package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestToolIDCap: past MaxToolIDs distinct tool ids, calls are counted
// under tool_id="other"; ids seen before the cap keep their series.
func TestToolIDCap(t *testing.T) {
	p := NewPrometheus()
	for i := range MaxToolIDs + 5 {
		p.ToolCall(fmt.Sprintf("native:t.%d", i), "http", "ok", time.Millisecond)
	}
	p.ToolCall("native:t.0", "http", "ok", time.Millisecond)
	p.ToolCall("native:t.late", "mcp", "forbidden", time.Millisecond)
	text, err := Text(p.calls)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(text, "toolgate_tool_calls_total{"); n != MaxToolIDs+2 { // + other/http/ok, other/mcp/forbidden
		t.Errorf("%d series, want %d", n, MaxToolIDs+2)
	}
	for _, want := range []string{
		`toolgate_tool_calls_total{status="ok",tool_id="other",transport="http"} 5`,
		`toolgate_tool_calls_total{status="ok",tool_id="native:t.0",transport="http"} 2`,
		`toolgate_tool_calls_total{status="forbidden",tool_id="other",transport="mcp"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("no %s", want)
		}
	}
}

// TestRuleIDCapAndText: rule ids are capped like tool ids, and Text
// renders the exposition.
func TestRuleIDCapAndText(t *testing.T) {
	p := NewPrometheus()
	for i := range MaxRuleIDs + 1 {
		p.PolicyDecision("allow", fmt.Sprintf("r%d", i), time.Microsecond)
	}
	text, err := Text(p.decisions)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `toolgate_policy_decisions_total{effect="allow",rule_id="other"} 1`) ||
		!strings.Contains(text, `toolgate_policy_decisions_total{effect="allow",rule_id="r0"} 1`) {
		t.Errorf("exposition:\n%.600s", text)
	}
}

// TestNop: Nop and nil are no-ops the pipeline skips.
func TestNop(t *testing.T) {
	if !IsNop(nil) || !IsNop(Nop) || IsNop(NewPrometheus()) || OrNop(nil) != Nop {
		t.Error("IsNop/OrNop")
	}
	Nop.ToolCall("x", "http", "ok", 0) // must not panic
}
