package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Keys accepted in each mapping; anything else is an issue.
var (
	policyKeys    = []string{"default", "rules", "ratelimits", "mode"}
	ruleKeys      = []string{"id", "effect", "tools", "scopes", "when", "reason", "mode", "approver"}
	rateLimitKeys = []string{"tools", "per", "rate", "burst"}
)

// maxAliasHops bounds the resolution of YAML alias chains.
const maxAliasHops = 32

// Parse decodes a standalone YAML document whose root is the policy mapping
// (the same shape as the `policy:` block of the configuration) and returns
// its Spec. file names the source in positions. The error is nil or Issues
// (errcode.InvalidConfig) listing every problem: YAML syntax errors, more
// than one document, and everything ParseNode reports. An empty document is
// the empty policy (default deny, no rules). Parse is safe for concurrent
// use; it follows the strict-decode rule of STYLE.md §37.
func Parse(file string, data []byte) (spec Spec, err error) {
	var issues Issues
	defer func() {
		// go.yaml.in/yaml/v3 is not expected to panic; if it does, fail
		// closed with a located issue rather than crash the loader.
		if r := recover(); r != nil {
			spec = Spec{}
			err = Issues{{Pos: Pos{File: file, Line: 1, Col: 1}, Message: fmt.Sprintf("invalid YAML: %v", r)}}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if derr := dec.Decode(&doc); derr != nil {
		if errors.Is(derr, io.EOF) {
			return Spec{Default: EffectDeny, Pos: Pos{File: file, Line: 1, Col: 1}}, nil
		}
		return Spec{}, Issues{yamlIssue(file, derr)}
	}
	var extra yaml.Node
	switch derr := dec.Decode(&extra); {
	case errors.Is(derr, io.EOF):
	case derr != nil:
		issues = append(issues, yamlIssue(file, derr))
	default:
		issues = append(issues, Issue{Pos: nodePos(file, &extra), Message: "more than one YAML document; a policy is one document"})
	}
	p := &parser{file: file, src: splitLines(data)}
	spec = p.parse(&doc)
	issues = append(issues, p.issues...)
	return spec, issues.err()
}

// ParseNode decodes the policy mapping node n (the value of the
// configuration's `policy:` key, or a document node whose root is that
// mapping) into a Spec. It is strict: unknown keys, duplicate keys and
// values of the wrong type (tools not a list, burst not an int, …) are
// issues located at the offending node; it collects every issue instead of
// stopping at the first. A nil or null node is the empty policy (default
// deny). Semantic checks (ids, effects, CEL, rates) are Compile's. The
// returned Issues are sorted by position and empty when there are none.
// ParseNode does not modify n and is safe for concurrent use.
func ParseNode(file string, n *yaml.Node) (Spec, Issues) {
	p := &parser{file: file}
	spec := p.parse(n)
	return spec, p.issues.Sorted()
}

// ParseNodeSource is ParseNode for a node decoded from src, the whole text
// of file: with the text, CEL errors in quoted scalars with escapes and in
// literal block scalars (when: |) are located exactly. Same errors and
// concurrency as ParseNode.
func ParseNodeSource(file string, src []byte, n *yaml.Node) (Spec, Issues) {
	p := &parser{file: file, src: splitLines(src)}
	spec := p.parse(n)
	return spec, p.issues.Sorted()
}

type parser struct {
	file   string
	src    [][]rune // source lines when known (Parse), for exact CEL columns
	issues Issues
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.issues = append(p.issues, Issue{Pos: nodePos(p.file, n), Message: fmt.Sprintf(format, args...)})
}

func nodePos(file string, n *yaml.Node) Pos {
	if n == nil || n.Line < 1 {
		return Pos{File: file, Line: 1, Col: 1}
	}
	return Pos{File: file, Line: n.Line, Col: max(n.Column, 1)}
}

// resolve follows document wrappers and aliases to the node they stand for;
// it returns nil for an unresolvable alias chain.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < maxAliasHops; i++ {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		default:
			return n
		}
	}
	if n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") ||
		(n.Kind == yaml.DocumentNode && len(n.Content) == 0)
}

func (p *parser) parse(root *yaml.Node) Spec {
	spec := Spec{Default: EffectDeny, Pos: nodePos(p.file, root)}
	n := resolve(root)
	if root != nil && n == nil {
		p.errorf(root, "policy: alias chain too long or cyclic")
		return spec
	}
	if isNull(n) {
		return spec
	}
	spec.Pos = nodePos(p.file, n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "policy must be a mapping with keys %s, got %s", strings.Join(policyKeys, ", "), kindName(n))
		return spec
	}
	p.mapping(n, "policy", policyKeys, func(key, val *yaml.Node) {
		switch key.Value {
		case "default":
			spec.defaultPos = nodePos(p.file, val)
			s, ok := p.str(val, "default")
			spec.Default = Effect(s)
			spec.defaultBad = !ok
		case "rules":
			p.seq(val, "rules", func(item *yaml.Node) {
				spec.Rules = append(spec.Rules, p.rule(item))
			})
		case "ratelimits":
			p.seq(val, "ratelimits", func(item *yaml.Node) {
				spec.RateLimits = append(spec.RateLimits, p.rateLimit(item))
			})
		case "mode":
			if m, ok := p.str(val, "mode"); ok {
				if m != ModeEnforce && m != ModeObserve {
					p.errorf(val, "mode must be %q or %q, got %q", ModeEnforce, ModeObserve, m)
				} else {
					spec.Mode = m
				}
			}
		}
	})
	return spec
}

// bad records in *mask that field failed to parse (already reported), so
// that Compile does not report it again.
func bad(mask *fieldMask, field fieldMask, ok bool) {
	if !ok {
		*mask |= field
	}
}

func (p *parser) rule(item *yaml.Node) RuleSpec {
	r := RuleSpec{Pos: nodePos(p.file, item)}
	if item.Kind != yaml.MappingNode {
		p.errorf(item, "rule must be a mapping with keys %s, got %s", strings.Join(ruleKeys, ", "), kindName(item))
		r.bad = ^fieldMask(0)
		return r
	}
	p.mapping(item, "rule", ruleKeys, func(key, val *yaml.Node) {
		var ok bool
		switch key.Value {
		case "id":
			r.idPos = nodePos(p.file, val)
			r.ID, ok = p.str(val, "id")
			bad(&r.bad, fieldID, ok)
		case "effect":
			r.effectPos = nodePos(p.file, val)
			var s string
			s, ok = p.str(val, "effect")
			r.Effect = Effect(s)
			bad(&r.bad, fieldEffect, ok)
		case "tools":
			r.toolsPos = nodePos(p.file, val)
			r.Tools, ok = p.strList(val, "tools")
			bad(&r.bad, fieldTools, ok)
		case "scopes":
			r.scopesPos = nodePos(p.file, val)
			r.Scopes, ok = p.strList(val, "scopes")
			bad(&r.bad, fieldScopes, ok)
		case "reason":
			r.Reason, _ = p.str(val, "reason")
		case "approver":
			if a, ok := p.str(val, "approver"); ok {
				if a != ApproverUser {
					p.errorf(val, "approver must be %q (the calling user, asked through MCP elicitation) or omitted", ApproverUser)
				} else {
					r.Approver = a
				}
			}
		case "mode":
			if m, ok := p.str(val, "mode"); ok {
				if m != ModeEnforce && m != ModeObserve {
					p.errorf(val, "mode must be %q or %q, got %q", ModeEnforce, ModeObserve, m)
				} else {
					r.Mode = m
				}
			}
		case "when":
			r.WhenPos = nodePos(p.file, val)
			var s string
			s, ok = p.str(val, "when")
			if ok && strings.TrimSpace(s) == "" {
				p.errorf(val, "when must not be empty; omit it for an unconditional rule")
				ok = false
			}
			bad(&r.bad, fieldWhen, ok)
			if ok {
				r.When = s
				r.whenCols, r.whenLine = p.whenMap(val)
			}
		}
	})
	return r
}

func (p *parser) rateLimit(item *yaml.Node) RateLimitSpec {
	rl := RateLimitSpec{Pos: nodePos(p.file, item)}
	if item.Kind != yaml.MappingNode {
		p.errorf(item, "ratelimits entry must be a mapping with keys %s, got %s", strings.Join(rateLimitKeys, ", "), kindName(item))
		rl.bad = ^fieldMask(0)
		return rl
	}
	p.mapping(item, "ratelimits entry", rateLimitKeys, func(key, val *yaml.Node) {
		var ok bool
		switch key.Value {
		case "tools":
			rl.toolsPos = nodePos(p.file, val)
			rl.Tools, ok = p.strList(val, "tools")
			bad(&rl.bad, fieldTools, ok)
		case "per":
			rl.perPos = nodePos(p.file, val)
			rl.Per, ok = p.str(val, "per")
			bad(&rl.bad, fieldPer, ok)
		case "rate":
			rl.ratePos = nodePos(p.file, val)
			// A rate is text ("10/s"); a bare number is an error with a
			// hint, since its unit would be a guess.
			if val.Kind == yaml.ScalarNode && (val.Tag == "!!int" || val.Tag == "!!float") {
				p.errorf(val, "rate must be written N/s, N/m or N/h (for example %q), got a bare number", clip(val.Value)+"/s")
				bad(&rl.bad, fieldRate, false)
				return
			}
			rl.Rate, ok = p.str(val, "rate")
			bad(&rl.bad, fieldRate, ok)
		case "burst":
			rl.burstPos = nodePos(p.file, val)
			rl.Burst, ok = p.int(val, "burst")
			bad(&rl.bad, fieldBurst, ok)
		}
	})
	return rl
}

// mapping walks the key/value pairs of n, reporting non-string keys,
// duplicate keys and keys outside allowed, and calls fn for the others.
func (p *parser) mapping(n *yaml.Node, what string, allowed []string, fn func(key, val *yaml.Node)) {
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := resolve(n.Content[i]), n.Content[i+1]
		if key == nil || key.Kind != yaml.ScalarNode {
			p.errorf(n.Content[i], "%s: keys must be strings", what)
			continue
		}
		if first, dup := seen[key.Value]; dup {
			p.errorf(key, "%s: duplicate key %q (first at %d:%d)", what, key.Value, first.Line, first.Column)
			continue
		}
		seen[key.Value] = key
		if !containsStr(allowed, key.Value) {
			msg := fmt.Sprintf("%s: unknown key %q", what, key.Value)
			if s := suggest(key.Value, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += "; want one of " + strings.Join(allowed, ", ")
			}
			p.issues = append(p.issues, Issue{Pos: nodePos(p.file, key), Message: msg})
			continue
		}
		v := resolve(val)
		if v == nil {
			p.errorf(val, "%s: alias chain too long or cyclic", key.Value)
			continue
		}
		fn(key, v)
	}
}

func (p *parser) seq(n *yaml.Node, what string, fn func(item *yaml.Node)) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list, got %s", what, kindName(n))
		return
	}
	for _, item := range n.Content {
		it := resolve(item)
		if it == nil {
			p.errorf(item, "%s: alias chain too long or cyclic", what)
			continue
		}
		fn(it)
	}
}

func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		p.errorf(n, "%s must be a string, got %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) strList(n *yaml.Node, what string) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list of strings, got %s", what, kindName(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for _, item := range n.Content {
		it := resolve(item)
		if it == nil {
			p.errorf(item, "%s: alias chain too long or cyclic", what)
			ok = false
			continue
		}
		if s, good := p.str(it, what+" item"); good {
			out = append(out, s)
		} else {
			ok = false
		}
	}
	return out, ok
}

func (p *parser) int(n *yaml.Node, what string) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errorf(n, "%s must be an integer, got %s", what, kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 32)
	if err != nil {
		p.errorf(n, "%s must be an integer between %d and %d, got %s", what, -1<<31, 1<<31-1, n.Value)
		return 0, false
	}
	return int(v), true
}

// kindName describes a node for messages: "a list", "a mapping", "an
// integer (5)", …
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer (" + clip(n.Value) + ")"
		case "!!float":
			return "a number (" + clip(n.Value) + ")"
		case "!!bool":
			return "a boolean (" + clip(n.Value) + ")"
		case "!!null":
			return "null"
		default:
			return "a scalar tagged " + clip(n.Tag)
		}
	default:
		return "an unsupported YAML node"
	}
}

func clip(s string) string {
	if utf8.RuneCountInString(s) > 40 {
		return string([]rune(s)[:40]) + "…"
	}
	return s
}

func scalarStyle(n *yaml.Node) whenStyle {
	if strings.Contains(n.Value, "\n") {
		return whenUnknown
	}
	switch {
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return whenUnknown
	case n.Style&yaml.DoubleQuotedStyle != 0:
		return whenDoubleQuoted
	case n.Style&yaml.SingleQuotedStyle != 0:
		return whenSingleQuoted
	default:
		return whenPlain
	}
}

// whenMap maps the `when` scalar back to the file: for each line of the
// expression, the 1-based file column of each of its runes; the expression's
// first line is on file line first. It returns nil when the mapping is
// unknown. One-line flow scalars are mapped exactly with the source text
// (Parse, ParseNodeSource) and assuming the shortest escapes without it;
// literal block scalars (|) are mapped only with the source text.
func (p *parser) whenMap(n *yaml.Node) (cols [][]int, first int) {
	if n.Line < 1 || n.Column < 1 {
		return nil, 0
	}
	if n.Style&yaml.LiteralStyle != 0 {
		return p.literalMap(n)
	}
	style := scalarStyle(n)
	if style == whenUnknown {
		return nil, 0
	}
	var raw []rune
	if p.src != nil {
		if n.Line > len(p.src) || n.Column-1 > len(p.src[n.Line-1]) {
			return nil, 0
		}
		raw = p.src[n.Line-1][n.Column-1:]
	} else {
		raw = []rune(synthesize(n.Value, style))
	}
	if c := mapColumns([]rune(n.Value), raw, style, n.Column); c != nil {
		return [][]int{c}, n.Line
	}
	return nil, 0
}

// literalMap maps a literal block scalar, whose content starts on the line
// after its indicator and keeps its line breaks, with a common indentation.
func (p *parser) literalMap(n *yaml.Node) ([][]int, int) {
	if p.src == nil {
		return nil, 0
	}
	lines := strings.Split(strings.TrimRight(n.Value, "\n"), "\n")
	indent := -1
	cols := make([][]int, len(lines))
	for i, l := range lines {
		fl := n.Line + 1 + i
		if fl > len(p.src) {
			return nil, 0
		}
		src := p.src[fl-1]
		if l == "" {
			continue
		}
		if indent < 0 {
			indent = len(src) - len([]rune(strings.TrimLeft(string(src), " ")))
		}
		rl := []rune(l)
		if indent+len(rl) > len(src) || string(src[indent:indent+len(rl)]) != l {
			return nil, 0
		}
		cols[i] = make([]int, len(rl))
		for k := range rl {
			cols[i][k] = indent + k + 1
		}
	}
	return cols, n.Line + 1
}

// synthesize writes value as a one-line YAML scalar of the given style with
// the shortest escapes.
func synthesize(value string, style whenStyle) string {
	switch style {
	case whenSingleQuoted:
		return "'" + strings.ReplaceAll(value, "'", "''") + "'"
	case whenDoubleQuoted:
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range value {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, "\\x%02x", r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	default:
		return value
	}
}

// mapColumns aligns the decoded scalar value with its raw one-line source
// (starting at the scalar's first character, column col) and returns the
// column of each decoded rune, or nil when they do not align.
func mapColumns(value, raw []rune, style whenStyle, col int) []int {
	cols := make([]int, len(value))
	i := 0
	switch style {
	case whenPlain:
		if len(raw) < len(value) {
			return nil
		}
		for k := range value {
			if raw[k] != value[k] {
				return nil
			}
			cols[k] = col + k
		}
		return cols
	case whenSingleQuoted, whenDoubleQuoted:
		if len(raw) == 0 || raw[0] != quote(style) {
			return nil
		}
		i = 1
	default:
		return nil
	}
	for k, r := range value {
		if i >= len(raw) {
			return nil // the scalar continues on the next line
		}
		cols[k] = col + i
		switch {
		case style == whenSingleQuoted && raw[i] == '\'':
			if i+1 >= len(raw) || raw[i+1] != '\'' || r != '\'' {
				return nil
			}
			i += 2
		case style == whenDoubleQuoted && raw[i] == '\\':
			if i+1 >= len(raw) {
				return nil
			}
			switch raw[i+1] {
			case 'x':
				i += 4
			case 'u':
				i += 6
			case 'U':
				i += 10
			default:
				i += 2
			}
		default:
			if raw[i] != r {
				return nil
			}
			i++
		}
	}
	if i >= len(raw) || raw[i] != quote(style) {
		return nil
	}
	return cols
}

func quote(style whenStyle) rune {
	if style == whenDoubleQuoted {
		return '"'
	}
	return '\''
}

func splitLines(data []byte) [][]rune {
	lines := strings.Split(string(data), "\n")
	out := make([][]rune, len(lines))
	for i, l := range lines {
		out[i] = []rune(strings.TrimSuffix(l, "\r"))
	}
	return out
}

var yamlLineRE = regexp.MustCompile(`line (\d+)(?:, column (\d+))?`)

// yamlIssue turns a go.yaml.in/yaml/v3 error ("yaml: line 3: …") into a
// located issue.
func yamlIssue(file string, err error) Issue {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	pos := Pos{File: file, Line: 1, Col: 1}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		if l, e := strconv.Atoi(m[1]); e == nil && l >= 1 {
			pos.Line = l
		}
		if m[2] != "" {
			if c, e := strconv.Atoi(m[2]); e == nil && c >= 1 {
				pos.Col = c
			}
		}
		msg = strings.TrimSpace(strings.TrimPrefix(strings.Replace(msg, m[0], "", 1), ":"))
	}
	return Issue{Pos: pos, Message: "invalid YAML: " + msg}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the allowed key closest to key when it is a likely typo
// (edit distance ≤ 1, or ≤ 2 for keys longer than 4), else "".
func suggest(key string, allowed []string) string {
	limit := 2 // allowed distance + 1: one edit for short keys, two for longer ones
	if len(key) > 4 {
		limit = 3
	}
	best, bestD := "", limit
	for _, a := range allowed {
		if d := editDistance(key, a, bestD); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit when it is
// at least limit.
func editDistance(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 {
		return limit
	}
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(rb)], limit)
}
