package toolgate_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/schematest"
)

// Issue 6, policy dry run: an observe-mode rule, or a whole policy in
// observe mode, is evaluated and its would-be denial recorded on
// agent.toolCalled (wouldDeny, wouldRuleId) and counted, but the call runs.
func TestPolicyDryRun(t *testing.T) {
	for _, c := range []struct {
		name, policy, rule string
	}{
		{"observe rule", `
default: deny
rules:
  - {id: writers, effect: allow, tools: ["native:*"]}
  - {id: no-etc, effect: deny, mode: observe, tools: ["native:fs.write"], when: 'args.path.startsWith("/etc")'}
`, "no-etc"},
		{"observe policy", `
mode: observe
default: deny
rules:
  - {id: readers, effect: allow, tools: ["native:fs.read"]}
`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := audit.NewMemoryLog()
			gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(t, c.policy), Events: log})
			if err != nil {
				t.Fatal(err)
			}
			ran := 0
			gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:fs.write", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
				func(context.Context, json.RawMessage) (any, error) { ran++; return "ok", nil })
			call := func(path string) *toolgate.Result {
				res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:fs.write", Principal: alice, RunID: "dry",
					Args: json.RawMessage(`{"path":"` + path + `"}`)})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			res := call("/etc/passwd")
			if res.Status != audit.StatusOK || !res.Decision.WouldDeny || res.Decision.WouldRuleID != c.rule || ran != 1 {
				t.Fatalf("dry run: %+v (ran %d)", res, ran)
			}
			evs := log.Events(alice.Tenant, "dry")
			var called map[string]any
			json.Unmarshal(evs[0].Payload, &called)
			if called["wouldDeny"] != true {
				t.Fatalf("agent.toolCalled does not record wouldDeny: %s", evs[0].Payload)
			}
			for _, ev := range evs {
				schematest.Validate(t, "run-event.schema.json", ev)
			}
			schematest.Validate(t, "run-event-payloads.schema.json#/$defs/agentToolCalled", json.RawMessage(evs[0].Payload))
			// Enforced, the same policy denies the call.
			enforced := strings.ReplaceAll(strings.ReplaceAll(c.policy, ", mode: observe", ""), "mode: observe\n", "")
			if err := gw.SetPolicy(mustPolicy(t, enforced)); err != nil {
				t.Fatal(err)
			}
			if res := call("/etc/passwd"); res.Status != audit.StatusForbidden || ran != 1 {
				t.Fatalf("enforced: %+v", res)
			}
			if err := gw.SetPolicy(mustPolicy(t, c.policy)); err != nil {
				t.Fatal(err)
			}
			if c.name == "observe rule" {
				if res := call("/tmp/x"); res.Decision.WouldDeny {
					t.Fatalf("a call the observe rule does not match is marked wouldDeny: %+v", res.Decision)
				}
			}
		})
	}
}
