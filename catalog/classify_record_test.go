package catalog

import "testing"

// TestClassifyRecord: a tools: entry with record: true marks the matched
// tools recorded; a later entry can turn it off; an entry without record
// leaves it.
func TestClassifyRecord(t *testing.T) {
	on, off := true, false
	d := ToolDescriptor{ToolID: "mcp:pay.charge", Source: SourceMCP}
	Classify(&d, []Classification{{Match: "mcp:pay.*", Record: &on}, {Match: "mcp:*"}})
	if !d.Record {
		t.Fatal("record: true did not mark the tool recorded")
	}
	Classify(&d, []Classification{{Match: "mcp:pay.*", Record: &on}, {Match: "mcp:pay.charge", Record: &off}})
	if d.Record {
		t.Error("a later record: false did not turn it off")
	}
}
