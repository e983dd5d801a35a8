package catalog

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

func mcpTool(server, name string, tier SafetyTier) Tool {
	return Tool{
		Descriptor: ToolDescriptor{ToolID: MCPToolID(server, name), Source: SourceMCP, SafetyTier: tier},
		Transport:  TransportMCP, Server: server, Name: name,
	}
}

func nativeTool(name string) Tool {
	return Tool{
		Descriptor: ToolDescriptor{ToolID: NativeToolID(name), Source: SourceNodePack, SafetyTier: TierPure},
		Transport:  TransportNative, Name: name,
	}
}

func httpTool(name string) Tool {
	return Tool{
		Descriptor: ToolDescriptor{ToolID: HTTPToolID(name), Source: SourceConnector, SafetyTier: TierRead},
		Transport:  TransportHTTP, Name: name,
	}
}

// fixtureTools is the catalog most tests resolve against.
func fixtureTools() []Tool {
	return []Tool{
		mcpTool("fs", "read_file", TierRead),
		mcpTool("fs", "dir.list", TierRead),
		mcpTool("github", "create_issue", TierWrite),
		mcpTool("gitlab", "create_issue", TierWrite),
		mcpTool("my-srv", "get", TierRead),
		nativeTool("clock.now"),
		httpTool("weather"),
		{
			Descriptor: ToolDescriptor{ToolID: "x-host-acme-foo", Source: SourceHostExtension, SafetyTier: TierExec},
			Transport:  TransportNative, Name: "foo",
		},
	}
}

func fixture(t testing.TB) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(fixtureTools(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type resolveCase struct {
	name, want string
	code       errcode.Code
}

func TestResolve(t *testing.T) {
	s := fixture(t)
	ok := func(name, want string) resolveCase { return resolveCase{name: name, want: want} }
	fail := func(name string, code errcode.Code) resolveCase { return resolveCase{name: name, code: code} }
	cases := []resolveCase{
		ok("mcp:fs.read_file", "mcp:fs.read_file"),
		ok("fs.read_file", "mcp:fs.read_file"),
		ok("fs__read_file", "mcp:fs.read_file"),
		ok("read_file", "mcp:fs.read_file"),
		ok("mcp%3Afs.read_file", "mcp:fs.read_file"),
		ok("mcp%3afs.read_file", "mcp:fs.read_file"),
		ok("fs%2Eread_file", "mcp:fs.read_file"),
		ok("fs%5F%5Fread_file", "mcp:fs.read_file"),
		ok("read%5Ffile", "mcp:fs.read_file"),
		ok("%6D%63%70%3A%66%73%2E%72%65%61%64%5F%66%69%6C%65", "mcp:fs.read_file"),
		// A tool name with dots: the server is everything before the first dot.
		ok("mcp:fs.dir.list", "mcp:fs.dir.list"),
		ok("fs.dir.list", "mcp:fs.dir.list"),
		ok("fs__dir.list", "mcp:fs.dir.list"),
		ok("dir.list", "mcp:fs.dir.list"),
		ok("my-srv.get", "mcp:my-srv.get"),
		ok("my-srv__get", "mcp:my-srv.get"),
		ok("get", "mcp:my-srv.get"),
		// Qualified spellings of a shared bare name are unique.
		ok("github.create_issue", "mcp:github.create_issue"),
		ok("github__create_issue", "mcp:github.create_issue"),
		ok("mcp:gitlab.create_issue", "mcp:gitlab.create_issue"),
		ok("gitlab%2Ecreate_issue", "mcp:gitlab.create_issue"),
		fail("create_issue", errcode.AmbiguousTool),
		fail("create%5Fissue", errcode.AmbiguousTool),
		// Native, HTTP and host-extension tools.
		ok("native:clock.now", "native:clock.now"),
		ok("clock.now", "native:clock.now"),
		ok("native%3Aclock.now", "native:clock.now"),
		ok("http:weather", "http:weather"),
		ok("weather", "http:weather"),
		ok("x-host-acme-foo", "x-host-acme-foo"),
		ok("foo", "x-host-acme-foo"),
		// Unknown.
		fail("mcp:fs.nope", errcode.NotFound),
		fail("nope", errcode.NotFound),
		fail("FS.read_file", errcode.NotFound),
		fail("fs:read_file", errcode.NotFound),
		fail("mcp:read_file", errcode.NotFound),
		fail("mcp:fs__read_file", errcode.NotFound),
		fail("clock__now", errcode.NotFound),
		fail("native:fs.read_file", errcode.NotFound),
		fail(" read_file", errcode.NotFound),
		fail("read_file\u00a0", errcode.NotFound),
		fail("mcp%253Afs.read_file", errcode.NotFound), // decoded once only
		fail("fs%252Eread_file", errcode.NotFound),
		fail("%", errcode.InvalidArgument),
		fail(strings.Repeat("a", MaxNameLen), errcode.NotFound),
		// Malformed input.
		fail("", errcode.InvalidArgument),
		fail("mcp%3", errcode.InvalidArgument),
		fail("fs%zzread", errcode.InvalidArgument),
		fail("read_file\x00", errcode.InvalidArgument),
		fail("read_file%00", errcode.InvalidArgument),
		fail("read\nfile", errcode.InvalidArgument),
		fail("read%0Afile", errcode.InvalidArgument),
		fail("read\x7ffile", errcode.InvalidArgument),
		fail("read\u0085file", errcode.InvalidArgument),
		fail("read%C2%85file", errcode.InvalidArgument),
		fail("read\xfffile", errcode.InvalidArgument),
		fail("read%FFfile", errcode.InvalidArgument),
		fail(strings.Repeat("a", MaxNameLen+1), errcode.InvalidArgument),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.Resolve(c.name)
			if c.code != "" {
				if got != nil || err == nil {
					t.Fatalf("Resolve(%q) = %v, %v; want error %q", c.name, got, err, c.code)
				}
				if !errors.Is(err, &errcode.Error{Code: c.code}) {
					t.Fatalf("Resolve(%q) error = %v, want code %q", c.name, err, c.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q) = %v", c.name, err)
			}
			if got.Descriptor.ToolID != c.want {
				t.Fatalf("Resolve(%q) = %q, want %q", c.name, got.Descriptor.ToolID, c.want)
			}
			if l, _ := s.Lookup(c.want); l != got {
				t.Fatalf("Resolve(%q) and Lookup(%q) disagree", c.name, c.want)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	s := fixture(t)

	_, err := s.Resolve("create_issue")
	e := errcode.As(err)
	if e == nil || e.Code != errcode.AmbiguousTool {
		t.Fatalf("Resolve(create_issue) = %v, want ambiguous_tool", err)
	}
	if errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Error("an ambiguous name also matches not_found")
	}
	want := []string{"mcp:github.create_issue", "mcp:gitlab.create_issue"}
	if got := e.Details["candidates"]; !reflect.DeepEqual(got, want) {
		t.Errorf("candidates = %v, want %v", got, want)
	}
	if !strings.Contains(e.Message, "mcp:github.create_issue, mcp:gitlab.create_issue") {
		t.Errorf("message %q does not name the candidates", e.Message)
	}
	// Details belong to the caller: changing them does not change the next answer.
	e.Details["candidates"].([]string)[0] = "mutated"
	_, err = s.Resolve("create_issue")
	if got := errcode.As(err).Details["candidates"]; !reflect.DeepEqual(got, want) {
		t.Errorf("after mutation candidates = %v, want %v", got, want)
	}

	_, err = s.Resolve("nope")
	if e := errcode.As(err); e == nil || e.Code != errcode.NotFound || e.Message != `unknown tool "nope"` {
		t.Errorf("Resolve(nope) = %#v", err)
	}
	if errors.Is(err, &errcode.Error{Code: errcode.AmbiguousTool}) {
		t.Error("not_found also matches ambiguous_tool")
	}
}

// TestResolvePrecedence: an exact canonical id beats another tool's
// non-canonical spelling; two non-canonical spellings that collide are
// ambiguous, however qualified.
func TestResolvePrecedence(t *testing.T) {
	tools := []Tool{
		{
			Descriptor: ToolDescriptor{ToolID: "x-host-acme-foo", Source: SourceHostExtension, SafetyTier: TierRead},
			Transport:  TransportNative, Name: "foo",
		},
		httpTool("x-host-acme-foo"), // its bare name is the other tool's canonical id
		mcpTool("a", "b", TierRead), // spelling "a.b"
		nativeTool("a.b"),           // bare name "a.b"
		mcpTool("x", "y.z", TierRead),
		mcpTool("w", "x.y.z", TierRead), // bare "x.y.z" is also mcp:x.y.z's qualified spelling
		mcpTool("q", "x.y", TierRead),
		mcpTool("k", "x.y", TierRead), // bare "x.y" shared with q
	}
	s, err := NewSnapshot(tools, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		ambiguous  []string
	}{
		{name: "x-host-acme-foo", want: "x-host-acme-foo"},
		{name: "http:x-host-acme-foo", want: "http:x-host-acme-foo"},
		{name: "foo", want: "x-host-acme-foo"},
		{name: "a.b", ambiguous: []string{"mcp:a.b", "native:a.b"}},
		{name: "a__b", want: "mcp:a.b"},
		{name: "b", want: "mcp:a.b"},
		{name: "native:a.b", want: "native:a.b"},
		{name: "mcp:a.b", want: "mcp:a.b"},
		{name: "x.y.z", ambiguous: []string{"mcp:w.x.y.z", "mcp:x.y.z"}}, // qualified "x.y.z" vs w's bare name
		{name: "y.z", want: "mcp:x.y.z"},
		{name: "x.y", ambiguous: []string{"mcp:k.x.y", "mcp:q.x.y"}},
		{name: "q.x.y", want: "mcp:q.x.y"},
	} {
		got, err := s.Resolve(c.name)
		if c.ambiguous != nil {
			e := errcode.As(err)
			if e == nil || e.Code != errcode.AmbiguousTool || !reflect.DeepEqual(e.Details["candidates"], c.ambiguous) {
				t.Errorf("Resolve(%q) = %v, %v; want ambiguous %v", c.name, got, err, c.ambiguous)
			}
			continue
		}
		if err != nil || got.Descriptor.ToolID != c.want {
			t.Errorf("Resolve(%q) = %v, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestSeparator(t *testing.T) {
	_, err := NewSnapshot([]Tool{mcpTool("fs", "read_file", TierRead), mcpTool("my_srv", "x", TierRead)}, Options{Separator: "_"})
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) || !strings.Contains(err.Error(), `server "my_srv"`) {
		t.Fatalf("server my_srv with separator _ = %v, want invalid_config naming it", err)
	}
	s, err := NewSnapshot([]Tool{mcpTool("fs", "read_file", TierRead), mcpTool("my_srv", "x", TierRead)}, Options{Separator: "--"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Separator() != "--" {
		t.Errorf("Separator() = %q", s.Separator())
	}
	for name, want := range map[string]string{"fs--read_file": "mcp:fs.read_file", "my_srv--x": "mcp:my_srv.x"} {
		if got, err := s.Resolve(name); err != nil || got.Descriptor.ToolID != want {
			t.Errorf("Resolve(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := s.Resolve("fs__read_file"); !errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Errorf("the default separator still resolves under a custom one: %v", err)
	}
	if d := fixture(t); d.Separator() != DefaultSeparator {
		t.Errorf("default Separator() = %q", d.Separator())
	}
}

func TestNewSnapshotReportsEveryIssue(t *testing.T) {
	exec := mcpTool("fs", "sh", TierExec)
	wrongID := mcpTool("fs", "a", TierRead)
	wrongID.Name = "b"
	nativeWithServer := nativeTool("n1")
	nativeWithServer.Server = "fs"
	nativeMismatch := nativeTool("n2")
	nativeMismatch.Name = "other"
	httpWithNativeID := nativeTool("n3")
	httpWithNativeID.Transport = TransportHTTP
	noTransport := nativeTool("n4")
	noTransport.Transport = ""
	badName := Tool{
		Descriptor: ToolDescriptor{ToolID: "x-host-acme-z", Source: SourceHostExtension, SafetyTier: TierRead},
		Transport:  TransportHTTP, Name: "",
	}
	mcpAsNative := mcpTool("fs", "c", TierRead)
	mcpAsNative.Transport = TransportNative
	mcpAsNative.Server = ""
	tools := []Tool{
		mcpTool("fs", "read_file", TierRead),
		mcpTool("fs", "read_file", TierWrite), // duplicate
		exec,
		mcpTool("fs_", "x", TierRead),        // ends in part of "__"
		mcpTool("a__b", "x", TierRead),       // contains "__" (and the id is still syntactically fine)
		mcpTool("bad.server", "x", TierRead), // invalid server name
		wrongID,
		nativeWithServer,
		nativeMismatch,
		httpWithNativeID,
		noTransport,
		badName,
		mcpAsNative,
	}
	_, err := NewSnapshot(tools, Options{})
	e := errcode.As(err)
	if e == nil || e.Code != errcode.InvalidConfig {
		t.Fatalf("NewSnapshot = %v, want invalid_config", err)
	}
	issues, _ := e.Details["issues"].([]string)
	for _, want := range []string{
		`tools[1] "mcp:fs.read_file": duplicate toolId (first at tools[0])`,
		`tools[2] "mcp:fs.sh": safetyTier: exec requires source`,
		`tools[3] "mcp:fs_.x": server "fs_" contains or ends in part of the naming separator`,
		`tools[4] "mcp:a__b.x": server "a__b" contains`,
		`tools[5] "mcp:bad.server.x": server: invalid server name "bad.server"`,
		`tools[6] "mcp:fs.a": an mcp transport tool on server "fs" named "b" must have toolId "mcp:fs.b"`,
		`tools[7] "native:n1": server "fs" is set`,
		`tools[8] "native:n2": name "other" must be the part after "native:"`,
		`tools[9] "native:n3": a http transport tool cannot have a native toolId`,
		`tools[10] "native:n4": transport "" is not one of`,
		`tools[11] "x-host-acme-z": name "" must be non-empty`,
		`tools[12] "mcp:fs.c": a native transport tool cannot have a mcp toolId`,
	} {
		found := false
		for _, is := range issues {
			found = found || strings.HasPrefix(is, want)
		}
		if !found {
			t.Errorf("issues lack %q\nissues:\n%s", want, strings.Join(issues, "\n"))
		}
	}
	if !strings.Contains(e.Message, "issue(s)") {
		t.Errorf("message = %q", e.Message)
	}

	if _, err := NewSnapshot(nil, Options{Separator: ":"}); !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) {
		t.Errorf("separator ':' accepted: %v", err)
	}
}

func TestNewSnapshotCapsIssues(t *testing.T) {
	var tools []Tool
	for range 150 {
		tools = append(tools, Tool{Transport: TransportNative}) // several issues each
	}
	_, err := NewSnapshot(tools, Options{})
	e := errcode.As(err)
	if e == nil {
		t.Fatal("no error")
	}
	if issues := e.Details["issues"].([]string); len(issues) != maxIssues {
		t.Errorf("got %d issues in details, want %d", len(issues), maxIssues)
	}
	if !strings.Contains(e.Message, "more") {
		t.Errorf("message does not say more were left out: %.200s", e.Message)
	}
}

func TestEmptySnapshot(t *testing.T) {
	s, err := NewSnapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || len(s.Tools()) != 0 || len(s.Version()) != 64 {
		t.Errorf("Len=%d Tools=%d Version=%q", s.Len(), len(s.Tools()), s.Version())
	}
	if _, err := s.Resolve("x"); !errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Errorf("Resolve on empty = %v", err)
	}
}

func TestToolsSortedAndLen(t *testing.T) {
	s := fixture(t)
	ids := make([]string, 0, s.Len())
	for _, tl := range s.Tools() {
		ids = append(ids, tl.Descriptor.ToolID)
	}
	want := []string{
		"http:weather", "mcp:fs.dir.list", "mcp:fs.read_file", "mcp:github.create_issue",
		"mcp:gitlab.create_issue", "mcp:my-srv.get", "native:clock.now", "x-host-acme-foo",
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("Tools() order = %v, want %v", ids, want)
	}
	if s.Len() != len(want) {
		t.Errorf("Len() = %d", s.Len())
	}
	if _, ok := s.Lookup("fs.read_file"); ok {
		t.Error("Lookup accepted a non-canonical spelling")
	}
	if _, ok := s.Lookup("mcp%3Afs.read_file"); ok {
		t.Error("Lookup decoded its argument")
	}
}

// TestSnapshotImmutable: the snapshot deep-copies its input, and the slice
// Tools returns belongs to the caller. Returned *Tool values are shared and
// read-only by contract; Clone gives a private copy.
func TestSnapshotImmutable(t *testing.T) {
	in := fixtureTools()
	in[0].Descriptor.Auth = &Auth{Scopes: []string{"fs:read"}}
	in[0].Descriptor.InputSchema = json.RawMessage(`{"type":"object"}`)
	s, err := NewSnapshot(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Version()
	snapshotOf := func() []Tool {
		var out []Tool
		for _, tl := range s.Tools() {
			out = append(out, tl.Clone())
		}
		return out
	}
	want := snapshotOf()

	// Mutate everything reachable from the input.
	in[0].Descriptor.Auth.Scopes[0] = "fs:admin"
	in[0].Descriptor.Auth.CredentialRef = true
	in[0].Descriptor.InputSchema[2] = 'X'
	in[0].Descriptor.SafetyTier = TierExec
	in[0].Descriptor.ToolID = "mcp:fs.other"
	in[0].Name = "other"
	in[1] = nativeTool("replaced")
	in = append(in[:0], in[2:]...)
	_ = in

	// Mutate the slice Tools returned, and a clone of a returned tool.
	ts := s.Tools()
	ts[0], ts[1] = ts[1], ts[0]
	ts[2] = nil
	got, _ := s.Lookup("mcp:fs.read_file")
	c := got.Clone()
	c.Descriptor.Auth.Scopes[0] = "x"
	c.Descriptor.InputSchema[2] = 'Y'
	c.Name = "y"

	if !reflect.DeepEqual(snapshotOf(), want) {
		t.Error("snapshot content changed after mutating its input, Tools() result or a clone")
	}
	if s.Version() != before {
		t.Error("version changed")
	}
	if r, err := s.Resolve("read_file"); err != nil || r.Descriptor.Auth.Scopes[0] != "fs:read" {
		t.Errorf("Resolve(read_file) = %v, %v", r, err)
	}
	if _, err := s.Resolve("other"); err == nil {
		t.Error("a renamed input tool became resolvable")
	}
}

func TestVersion(t *testing.T) {
	a := fixtureTools()
	a[0].Descriptor.InputSchema = json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)
	b := fixtureTools()
	b[0].Descriptor.InputSchema = json.RawMessage(`{ "properties": {"path": {"type": "string"}},
		"type": "object" }`)
	slices.Reverse(b)
	sa, err := NewSnapshot(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := NewSnapshot(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sa.Version() != sb.Version() {
		t.Error("equal content (other order, whitespace and key order) gave different versions")
	}
	if len(sa.Version()) != 64 || strings.Trim(sa.Version(), "0123456789abcdef") != "" {
		t.Errorf("Version() = %q, want 64 lowercase hex digits", sa.Version())
	}
	for name, mut := range map[string]func([]Tool) ([]Tool, Options){
		"tier":  func(ts []Tool) ([]Tool, Options) { ts[0].Descriptor.SafetyTier = TierWrite; return ts, Options{} },
		"title": func(ts []Tool) ([]Tool, Options) { ts[0].Descriptor.Title = "t"; return ts, Options{} },
		"schema": func(ts []Tool) ([]Tool, Options) {
			ts[0].Descriptor.InputSchema = json.RawMessage(`{}`)
			return ts, Options{}
		},
		"scopes": func(ts []Tool) ([]Tool, Options) {
			ts[0].Descriptor.Auth = &Auth{Scopes: []string{"s"}}
			return ts, Options{}
		},
		"removed":   func(ts []Tool) ([]Tool, Options) { return ts[1:], Options{} },
		"separator": func(ts []Tool) ([]Tool, Options) { return ts, Options{Separator: "--"} },
		"name": func(ts []Tool) ([]Tool, Options) {
			ts[7].Name = "bar"
			return ts, Options{}
		},
		"transport": func(ts []Tool) ([]Tool, Options) {
			ts[7].Transport = TransportHTTP
			return ts, Options{}
		},
	} {
		ts, opts := mut(fixtureTools())
		s, err := NewSnapshot(ts, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Version() == fixture(t).Version() {
			t.Errorf("changing %s kept the version", name)
		}
	}
}

func TestConcurrentResolve(t *testing.T) {
	s := fixture(t)
	names := []string{"read_file", "fs__read_file", "mcp%3Afs.read_file", "create_issue", "nope", "", "clock.now"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				name := names[(g+i)%len(names)]
				if _, err := s.Resolve(name); err != nil {
					if c := errcode.CodeOf(err); c != errcode.NotFound && c != errcode.AmbiguousTool && c != errcode.InvalidArgument {
						t.Errorf("Resolve(%q): unexpected code %q", name, c)
					}
				}
				_ = s.Tools()
				_, _ = s.Lookup("mcp:fs.read_file")
			}
		})
	}
	wg.Wait()
}

// TestAmbiguousOption: a spelling listed in Options.Ambiguous is refused
// as ambiguous_tool naming its candidates even when only one claimant is
// in the snapshot (the other's server is down), while canonical ids and
// the other spellings still resolve (issue 13.11).
func TestAmbiguousOption(t *testing.T) {
	s, err := NewSnapshot([]Tool{mcpTool("a", "greet", TierRead)}, Options{
		Ambiguous: map[string][]string{"greet": {"mcp:b.greet", "mcp:a.greet"}, "mcp:a.greet": {"x"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Resolve("greet")
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.AmbiguousTool || !strings.Contains(e.Message, "mcp:a.greet, mcp:b.greet") {
		t.Fatalf("Resolve(greet) = %v", err)
	}
	for _, sp := range []string{"mcp:a.greet", "a.greet", "a__greet"} {
		if tl, err := s.Resolve(sp); err != nil || tl.Descriptor.ToolID != "mcp:a.greet" {
			t.Errorf("Resolve(%s) = %v, %v", sp, tl, err)
		}
	}
}
