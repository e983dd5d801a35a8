package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pat, name string
		want      bool
	}{
		{"*", "mcp:fs.read_file", true},
		{"mcp:fs.*", "mcp:fs.read_file", true},
		{"mcp:fs.*", "mcp:fsx.read_file", false},
		{"mcp:fs.read_*", "mcp:fs.write_file", false},
		{"mcp:*.read_*", "mcp:fs.read_text_file", true},
		{"native:clock.now", "native:clock.now", true},
		{"native:clock.now", "native:clock.nowx", false},
		{"mcp:fs.?ead", "mcp:fs.read", true},
		{"mcp:fs.?ead", "mcp:fs.ead", false},
		{"", "", true},
		{"", "x", false},
		{"**", "", true},
		{"a*b*c", "abxbxc", true},
		{"a*b*c", "abxbx", false},
	}
	for _, c := range cases {
		if got := Match(c.pat, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pat, c.name, got, c.want)
		}
	}
}

func TestValidToolPattern(t *testing.T) {
	for _, ok := range []string{"*", "*.write", "mcp:fs.*", "native:clock.now", "*:fs.*", "x-host-acme-run", "mcp:*", "http:weather"} {
		if err := ValidToolPattern(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for pat, want := range map[string]string{
		"fs.write_file":      `did you mean "mcp:fs.write_file"`,
		"fs__delete":         `did you mean "mcp:fs.delete"`,
		"MCP:fs.*":           `did you mean "mcp:fs.*"`,
		"mcp:fs.write_file ": "whitespace",
		"":                   "empty",
		"mcp:":               "nothing after",
	} {
		err := ValidToolPattern(pat)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", pat, err, want)
		}
	}
}
