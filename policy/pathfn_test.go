package policy

import (
	"strings"
	"testing"
)

// TestPathFunctions: path.clean and path.isUnder resolve ".." lexically, so
// a rule confining a tool to a directory cannot be escaped the way
// startsWith can (issue 13.8).
func TestPathFunctions(t *testing.T) {
	p := load(t, `rules:
  - {id: fs, effect: allow, tools: ["*"]}
  - {id: only-data, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && !path.isUnder(args.path, "/srv/data")'}
  - {id: rooted, effect: deny, tools: ["mcp:rel.*"], when: '!path.isUnder(args.path, "data", "/srv")'}
  - {id: clean, effect: deny, tools: ["mcp:clean.*"], when: 'path.clean(args.path) != args.want'}
`, Options{})
	for _, c := range []struct {
		tool, path string
		want       Effect
	}{
		{"mcp:fs.read", "/srv/data", EffectAllow},
		{"mcp:fs.read", "/srv/data/", EffectAllow},
		{"mcp:fs.read", "/srv/data/a/b.txt", EffectAllow},
		{"mcp:fs.read", "/srv/data/a/../b.txt", EffectAllow},
		{"mcp:fs.read", "/srv/data//./x", EffectAllow},
		{"mcp:fs.read", "a/b.txt", EffectDeny}, // relative, no root: never under (the upstream picks the base)
		{"mcp:fs.read", "", EffectDeny},
		{"mcp:fs.read", "/srv/data/../etc/passwd", EffectDeny},
		{"mcp:fs.read", "/srv/data/a/../../etc", EffectDeny},
		{"mcp:fs.read", "/srv/database/x", EffectDeny}, // a sibling sharing the prefix
		{"mcp:fs.read", "/srv", EffectDeny},
		{"mcp:fs.read", "../etc/passwd", EffectDeny},
		{"mcp:fs.read", "/etc/passwd", EffectDeny},
		{"mcp:rel.read", "/srv/data/x", EffectAllow},
		{"mcp:rel.read", "data/x", EffectAllow}, // relative: against root
		{"mcp:rel.read", "x", EffectDeny},
		{"mcp:rel.read", "data/../../etc", EffectDeny},
	} {
		d := p.Decide(t.Context(), call(alice, c.tool, nil, map[string]any{"path": c.path}))
		if d.Effect != c.want {
			t.Errorf("%s %q: %s (%s), want %s", c.tool, c.path, d.Effect, d.Reason, c.want)
		}
	}
	for in, want := range map[string]string{"/a/./b/../c//d/": "/a/c/d", "a/../../b": "../b", "": ".", "/..": "/"} {
		d := p.Decide(t.Context(), call(alice, "mcp:clean.x", nil, map[string]any{"path": in, "want": want}))
		if d.Effect != EffectAllow {
			t.Errorf("path.clean(%q) != %q: %s", in, want, d.Reason)
		}
	}
	// A relative dir without a root fails closed at run time...
	q := load(t, `rules:
  - {id: fs, effect: allow, tools: ["*"]}
  - {id: d, effect: deny, tools: ["*"], when: '!path.isUnder(args.path, args.dir)'}
`, Options{})
	if d := q.Decide(t.Context(), call(alice, "mcp:fs.read", nil, map[string]any{"path": "/x", "dir": "rel"})); d.Effect != EffectDeny || d.Layer != LayerError || !strings.Contains(d.Reason, `dir "rel" is not an absolute path`) {
		t.Errorf("relative dir: %+v", d)
	}
	// ...and a constant one is a load issue.
	_, err := Load("p.yaml", []byte(`rules:
  - {id: d, effect: deny, tools: ["*"], when: '!path.isUnder(args.path, "data")'}
  - {id: r, effect: deny, tools: ["*"], when: '!path.isUnder(args.path, "data", "srv")'}
`), Options{})
	want := `p.yaml:2:73: rule "d": when: path.isUnder: dir "data" is not an absolute path; give a root: path.isUnder(p, dir, root)
p.yaml:3:81: rule "r": when: path.isUnder: root "srv" is not an absolute path`
	if err == nil || err.Error() != want {
		t.Errorf("Load: got\n%v\nwant\n%s", err, want)
	}
}

// TestPathStartsWithWarning: startsWith on an argument named like a path
// is a located warning (the policy still loads); on other arguments, or
// through path.isUnder, it is not.
func TestPathStartsWithWarning(t *testing.T) {
	p, err := Load("p.yaml", []byte(`rules:
  - {id: a, effect: deny, tools: ["*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
  - {id: b, effect: deny, tools: ["*"], when: 'args.opts.targetDir.startsWith("/etc") || args["file_name"].startsWith("/x")'}
  - {id: c, effect: deny, tools: ["*"], when: 'args.text.startsWith("secret:") || path.isUnder(args.path, "/etc")'}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range p.Warnings() {
		got = append(got, w.String())
	}
	want := []string{
		`p.yaml:2:70: rule "a": args.path.startsWith(…) can be escaped with ".." ("/srv/data/../etc/passwd" starts with "/srv/data"); use path.isUnder(args.path, dir)`,
		`p.yaml:3:57: rule "b": args.targetDir.startsWith(…) can be escaped with ".." ("/srv/data/../etc/passwd" starts with "/srv/data"); use path.isUnder(args.targetDir, dir)`,
		`p.yaml:3:94: rule "b": args.file_name.startsWith(…) can be escaped with ".." ("/srv/data/../etc/passwd" starts with "/srv/data"); use path.isUnder(args.file_name, dir)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
