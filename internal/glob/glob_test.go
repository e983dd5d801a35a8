package glob

import "testing"

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
