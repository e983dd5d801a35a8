package mcpgw

import (
	"encoding/json"
	"testing"
)

// JSON-RPC ids match by value: the same string or integer written
// differently is the same id; fractions, huge numbers and non-ids match
// nothing.
func TestIDKey(t *testing.T) {
	same := [][]string{
		{`"a"`, `"\u0061"`, ` "a" `},
		{`7`, `7.0`, `7e0`, `70e-1`},
		{`0`, `-0`, `0.0`},
		{`9007199254740993`},
	}
	seen := map[string]string{}
	for _, group := range same {
		want, ok := idKey(json.RawMessage(group[0]))
		if !ok {
			t.Fatalf("%s: not an id", group[0])
		}
		if prev, dup := seen[want]; dup {
			t.Fatalf("%s and %s share key %q", group[0], prev, want)
		}
		seen[want] = group[0]
		for _, raw := range group[1:] {
			if got, ok := idKey(json.RawMessage(raw)); !ok || got != want {
				t.Errorf("%s: key %q (%v), want %q as for %s", raw, got, ok, want, group[0])
			}
		}
	}
	if a, _ := idKey(json.RawMessage(`9007199254740993`)); a == "n9007199254740992" {
		t.Errorf("large integer id rounded through float64: %q", a)
	}
	for _, bad := range []string{``, `1.5`, `1e30`, `null`, `true`, `{}`, `[1]`, `"unterminated`} {
		if k, ok := idKey(json.RawMessage(bad)); ok {
			t.Errorf("%q: key %q, want none", bad, k)
		}
	}
}
