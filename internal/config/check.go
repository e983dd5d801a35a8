package config

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	goccy "github.com/goccy/go-yaml"
	goccyparser "github.com/goccy/go-yaml/parser"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/policy"
)

// LoadAll is Load for `toolgate validate`: it returns the issues together
// with what it could decode (nil when the file is not a YAML mapping at
// all), so that the caller can add its own checks (CommandIssues, backend
// checks) and report every issue of every section at once. err is an I/O
// error only.
func LoadAll(path string) (*Config, policy.Issues, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, issues := parse(path, data)
	return cfg, issues, nil
}

// PosOf is the location in the file of the value at path (string keys,
// int indexes; the deepest node on the way when the path ends early), or
// the file's start for a Config that was not parsed from a file.
func (c *Config) PosOf(path ...any) policy.Pos {
	p := policy.Pos{File: c.File, Line: 1, Col: 1}
	if c.doc != nil {
		n := find(c.doc, path...)
		p.Line, p.Col = n.Line, n.Column
	}
	return p
}

// CommandIssues checks, without starting anything, that each stdio
// server's command names an executable that serve could start here: a
// name without a slash must be found on this environment's PATH (as
// serve's os/exec resolves it), a path (relative to the server's cwd when
// set) must be an executable regular file. serve would otherwise retry the
// start forever and /readyz never turn ready. The issues are located at
// the command's first element.
func (c *Config) CommandIssues() policy.Issues {
	var issues policy.Issues
	for i, s := range c.Servers {
		if len(s.Command) == 0 || s.URL != "" {
			continue // no stdio server, or both (already an issue)
		}
		if msg := commandProblem(s.Command[0], s.Cwd); msg != "" {
			issues = append(issues, policy.Issue{Pos: c.PosOf("servers", i, "command", 0),
				Message: fmt.Sprintf("servers[%d] (%s): command %q %s", i, s.Name, s.Command[0], msg)})
		}
	}
	return issues
}

// commandProblem says why name cannot be started as a command with
// working directory cwd, or "".
func commandProblem(name, cwd string) string {
	if name == "" {
		return "is empty"
	}
	if !strings.ContainsRune(name, os.PathSeparator) && !strings.ContainsRune(name, '/') {
		if _, err := exec.LookPath(name); err != nil {
			if errors.Is(err, exec.ErrDot) {
				return "is found only in the current directory through PATH, which os/exec refuses; use ./" + name
			}
			return "is not found on PATH or is not executable"
		}
		return ""
	}
	path := name
	if cwd != "" && !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Sprintf("does not exist (%s)", path)
	case !st.Mode().IsRegular():
		return fmt.Sprintf("is not a regular file (%s)", path)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Sprintf("is not executable (%s)", path)
	}
	return ""
}

// ServerRefIssues reports each mcp: tool pattern of the policy rules, the
// rate limits and the tools: classifications whose server is literal and
// not configured: "mcp:nosuch.*" with no server nosuch, a rule that can
// never apply (most often a typo). A pattern whose server part has a
// wildcard is not checked. It is a check of `toolgate validate`, not a
// load error: a file may keep rules for a server it serves only at times.
func (c *Config) ServerRefIssues() policy.Issues {
	var issues policy.Issues
	if c.doc != nil {
		c.checkServerRefs(c.doc, func(n *yaml.Node, format string, args ...any) {
			issues = append(issues, policy.Issue{Pos: policy.Pos{File: c.File, Line: n.Line, Col: n.Column}, Message: fmt.Sprintf(format, args...)})
		})
	}
	return issues
}

// checkServerRefs implements ServerRefIssues over the document doc.
func (c *Config) checkServerRefs(doc *yaml.Node, add func(*yaml.Node, string, ...any)) {
	servers := make([]string, 0, len(c.Servers))
	known := map[string]bool{}
	for _, s := range c.Servers {
		servers = append(servers, s.Name)
		known[s.Name] = true
	}
	check := func(where string, n *yaml.Node) {
		if n == nil || n.Kind != yaml.ScalarNode {
			return
		}
		rest, ok := strings.CutPrefix(n.Value, "mcp:")
		if !ok {
			return
		}
		server := rest
		if i := strings.IndexAny(rest, "./#"); i >= 0 {
			server = rest[:i]
		}
		if server == "" || strings.ContainsAny(server, "*?") || known[server] {
			return
		}
		hint := ""
		if s := closest(server, servers); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		} else if len(servers) > 0 {
			hint = "; configured: " + strings.Join(servers, ", ")
		}
		add(n, "%s %q names server %q, which is not configured in servers%s", where, n.Value, server, hint)
	}
	items := func(n *yaml.Node) []*yaml.Node {
		if n == nil || n.Kind != yaml.SequenceNode {
			return nil
		}
		return n.Content
	}
	value := func(n *yaml.Node, key string) *yaml.Node {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	for i, t := range items(value(doc, "tools")) {
		check(fmt.Sprintf("tools[%d].match", i), value(t, "match"))
	}
	pol := value(doc, "policy")
	for i, r := range items(value(pol, "rules")) {
		id := fmt.Sprintf("rules[%d]", i)
		if v := value(r, "id"); v != nil && v.Kind == yaml.ScalarNode {
			id = fmt.Sprintf("rule %q", v.Value)
		}
		for _, p := range items(value(r, "tools")) {
			check(id+": tool pattern", p)
		}
	}
	for i, r := range items(value(pol, "ratelimits")) {
		for _, p := range items(value(r, "tools")) {
			check(fmt.Sprintf("ratelimits[%d]: tool pattern", i), p)
		}
	}
}

// syntaxPos locates a YAML syntax error that yaml.v3 reported as err.
// yaml.v3's errors carry a line only (sometimes none, sometimes the line
// of the enclosing construct), so the document is scanned again with
// goccy/go-yaml, whose syntax errors carry the offending token's line and
// column; if that parser finds no error (or panics), the position is
// yaml.v3's line at its first non-blank column.
func syntaxPos(file string, data []byte, err error) policy.Pos {
	if line, col, ok := goccyErrorPos(data); ok {
		return policy.Pos{File: file, Line: line, Col: col}
	}
	p := policy.Pos{File: file, Line: yamlErrLine(err), Col: 1}
	lines := strings.Split(string(data), "\n")
	if p.Line >= 1 && p.Line <= len(lines) {
		if i := strings.IndexFunc(lines[p.Line-1], func(r rune) bool { return r != ' ' }); i >= 0 {
			p.Col = i + 1
		}
	}
	return p
}

// goccyErrorPos is the position of goccy/go-yaml's syntax error in data.
func goccyErrorPos(data []byte) (line, col int, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := goccyparser.ParseBytes(data, 0)
	var se *goccy.SyntaxError
	if !errors.As(err, &se) || se.Token == nil || se.Token.Position == nil || se.Token.Position.Line < 1 {
		return 0, 0, false
	}
	return se.Token.Position.Line, max(se.Token.Position.Column, 1), true
}

// keyHint is the hint appended to an unknown-key decode error msg (from
// yaml.v3, "field K not found in type config.T"): the closest key of T
// (" (did you mean ...?)"), else the keys T accepts. "" for other errors.
func keyHint(msg string) string {
	sm := unknownFieldIn.FindStringSubmatch(msg)
	if sm == nil {
		return ""
	}
	keys := keysOf[sm[2]]
	if len(keys) == 0 {
		return ""
	}
	if s := closest(sm[1], keys); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return "; want one of " + strings.Join(keys, ", ")
}

var unknownFieldIn = regexp.MustCompile(`^field (\S+) not found in type config\.(\w+)$`)

// keysOf maps each struct type of the configuration (by Go name) to the
// YAML keys it accepts, in declaration order.
var keysOf = func() map[string][]string {
	out := map[string][]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Config]().PkgPath() || out[t.Name()] != nil {
			return
		}
		keys := []string{}
		out[t.Name()] = keys
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			keys = append(keys, tag)
			walk(f.Type)
		}
		out[t.Name()] = keys
	}
	walk(reflect.TypeFor[Config]())
	return out
}()

// closest is the candidate within a small edit distance of s (at most 2,
// and at most half of s's length), "" if none.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD && d*2 <= len(s) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
