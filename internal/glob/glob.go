// Package glob matches toolId patterns: '*' matches any run of characters
// (including none, and including '.', ':' and '/'), '?' matches exactly one
// character, everything else matches itself. Matching is on the canonical
// toolId (DESIGN.md decision 3). Match is allocation-free and safe for
// concurrent use.
package glob

import "strings"

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
