// Package glob matches toolId patterns: '*' matches any run of characters
// (including none, and including '.', ':' and '/'), '?' matches exactly one
// character, everything else matches itself. Matching is on the canonical
// toolId (DESIGN.md decision 3). Match is allocation-free and safe for
// concurrent use.
package glob

import (
	"fmt"
	"strings"
	"unicode"
)

// Match reports whether name matches pattern.
func Match(pattern, name string) bool {
	if !strings.ContainsAny(pattern, "*?") {
		return pattern == name
	}
	// Iterative wildcard matching with single backtrack point (linear for '*').
	p, n := 0, 0
	starP, starN := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			starP, starN = p, n
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case starP >= 0:
			starN++
			p, n = starP+1, starN
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// IsPattern reports whether s contains a wildcard.
func IsPattern(s string) bool { return strings.ContainsAny(s, "*?") }

// ValidToolPattern checks that pattern can match a canonical toolId
// (DESIGN.md decision 3: matching is on the canonical id only). A pattern
// starts with a wildcard (which spans the scope: "*", "*.write"), with a
// lowercase scope and a colon ("mcp:", "native:", "http:", "connector:",
// "openwop:", ...), or with "x-host-"; it contains no whitespace or control
// characters. A non-canonical spelling such as
// "fs.write_file", "fs__delete" or "MCP:fs.*" would silently never match,
// so it is an error whose message suggests the canonical form.
func ValidToolPattern(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("empty tool pattern")
	}
	for _, r := range pattern {
		if r <= ' ' || r == 0x7f || unicode.IsSpace(r) {
			return fmt.Errorf("tool pattern %q contains whitespace or a control character", pattern)
		}
	}
	if pattern[0] == '*' || pattern[0] == '?' || strings.HasPrefix(pattern, "x-host-") {
		return nil // a leading wildcard spans the scope ("*.write", "*:fs.*")
	}
	scope, rest, ok := strings.Cut(pattern, ":")
	if !ok || scope == "" {
		hint := ""
		if i := strings.Index(pattern, "__"); i > 0 {
			hint = fmt.Sprintf("; did you mean %q?", "mcp:"+pattern[:i]+"."+pattern[i+2:])
		} else if strings.Contains(pattern, ".") {
			hint = fmt.Sprintf("; did you mean %q?", "mcp:"+pattern)
		}
		return fmt.Errorf("tool pattern %q is not a canonical toolId pattern (<scope>:<name>, e.g. mcp:<server>.<tool> or native:<name>)%s", pattern, hint)
	}
	for _, r := range scope {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '*' || r == '?') {
			return fmt.Errorf("tool pattern %q: scope %q must be lowercase (toolIds are case-sensitive: did you mean %q?)", pattern, scope, strings.ToLower(scope)+":"+rest)
		}
	}
	if rest == "" {
		return fmt.Errorf("tool pattern %q has nothing after the scope", pattern)
	}
	return nil
}
