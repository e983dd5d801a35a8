package schematest

import (
	"encoding/json"
	"testing"
)

func TestSchemasLoadAndDiscriminate(t *testing.T) {
	good := json.RawMessage(`{"toolId":"mcp:fs.read","source":"mcp","safetyTier":"read"}`)
	Validate(t, "tool-descriptor.schema.json", good)
	for _, bad := range []string{
		`{"toolId":"mcp:fs.read","source":"mcp"}`,
		`{"toolId":"x","source":"node-pack","safetyTier":"exec"}`,
		`{"toolId":"x","source":"mcp","safetyTier":"read","extra":1}`,
	} {
		if Check("tool-descriptor.schema.json", json.RawMessage(bad)) == nil {
			t.Errorf("%s validated, want rejection", bad)
		}
	}
	Validate(t, "run-event-payloads.schema.json#/$defs/agentToolCalled", json.RawMessage(`{"agentId":"core.system","toolName":"t","callId":"c"}`))
	if Check("run-event-payloads.schema.json#/$defs/agentToolCalled", json.RawMessage(`{"agentId":"core.system"}`)) == nil {
		t.Error("agentToolCalled without toolName validated")
	}
}
