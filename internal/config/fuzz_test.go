package config

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// FuzzParse: any input yields a config or located issues, never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(designConfig))
	f.Add([]byte("listen: 127.0.0.1:1\npolicy: {rules: [{id: a, effect: allow, tools: ['*'], when: 'args.x > 1'}]}\n"))
	f.Add([]byte("servers: [{name: x, url: 'http://h/mcp', headers: {a: '{{credential:y}}'}}]\n"))
	f.Add([]byte("listen: 127.0.0.1:1\nservers:\n  - {name: fs, url: \"http://x}\n"))
	f.Add([]byte("listen: @a\npolicy: {rules: [{id: x, tools: [a, b}]}\n"))
	f.Add([]byte("servers:\n\t- {name: fs, comand: [x]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		var issues policy.Issues
		if !errors.As(err, &issues) || len(issues) == 0 {
			t.Fatalf("error is not located issues: %v", err)
		}
		for _, i := range issues {
			if i.Pos.Line < 1 || i.Pos.Col < 1 {
				t.Fatalf("issue %q at %d:%d, want a line and column ≥ 1", i.Message, i.Pos.Line, i.Pos.Col)
			}
		}
	})
}
