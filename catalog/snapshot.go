package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
)

// Transport says how a call to a tool is carried (DESIGN.md Vocabulary).
type Transport string

// The closed set of transports.
const (
	TransportMCP    Transport = "mcp"
	TransportHTTP   Transport = "http"
	TransportNative Transport = "native"
)

// Valid reports whether t is mcp, http or native. Pure; safe for concurrent
// use.
func (t Transport) Valid() bool {
	switch t {
	case TransportMCP, TransportHTTP, TransportNative:
		return true
	}
	return false
}

// Tool is one catalog entry: its OpenWOP descriptor plus the routing facts
// the wire never shows. NewSnapshot requires them to agree with the toolId:
//
//   - TransportMCP: Server is a valid server name, Name is the tool's name on
//     that upstream, and Descriptor.ToolID == MCPToolID(Server, Name);
//   - TransportNative / TransportHTTP: Server is "", and for a `native:` /
//     `http:` toolId Name is the part after the prefix; any other toolId
//     (for example `x-host-acme-foo`) carries a free Name, used as its bare
//     spelling; an `mcp:` toolId is never native or http.
//
// Name always uses the alphabet [A-Za-z0-9_./-]. A Tool obtained from a
// Snapshot is shared and read-only; use Clone for a private copy.
type Tool struct {
	Descriptor ToolDescriptor
	Transport  Transport
	Server     string
	Name       string
	// Digest is the definition digest the tool is served under
	// (DefinitionDigest, "sha256:<hex>"); "" when none was computed. Every
	// call's receipt carries it (toolDigest).
	Digest string
}

// Clone returns a deep copy of t (see ToolDescriptor.Clone). Safe for
// concurrent use with other readers of t.
func (t *Tool) Clone() Tool {
	c := *t
	c.Descriptor = t.Descriptor.Clone()
	return c
}

// DefaultSeparator is the MCP-surface separator between server and tool
// names (`fs__read_file`) when Options.Separator is empty (DESIGN.md
// Surfaces, `naming.separator`).
const DefaultSeparator = "__"

// Options configures NewSnapshot. The zero value is valid.
type Options struct {
	// Separator joins server and tool in MCP-surface names
	// (`<server><sep><tool>`). Empty means DefaultSeparator. It must be 1 to
	// 16 bytes of [A-Za-z0-9_.-]; no server name may contain it (see
	// NewSnapshot).
	Separator string
	// Ambiguous maps spellings (not toolIds) to the toolIds that claimed
	// them: Resolve refuses each as ambiguous_tool naming those candidates,
	// even when the snapshot holds only one of the tools (another's server
	// is down or has not listed yet), so a spelling known to be shared is
	// never routed to whichever tool happens to be present (issue 13.11).
	// Nil means none. NewSnapshot copies it.
	Ambiguous map[string][]string
}

// Snapshot is an immutable set of tools with O(1) exact lookup by toolId and
// O(1) resolution of every accepted spelling (canonical identity first,
// DESIGN.md decision 3; precedence rules in the package doc). All methods
// are safe for concurrent use. Returned *Tool values point into the
// snapshot and must not be modified.
type Snapshot struct {
	sep     string
	tools   []*Tool                // sorted by toolId
	byID    map[string]*Tool       // canonical toolId → tool
	names   map[string]*resolution // every accepted spelling (decoded) → outcome
	version string
}

// resolution is the precomputed outcome of one spelling: exactly one tool,
// or (tool == nil) the sorted canonical ids of every candidate.
type resolution struct {
	tool       *Tool
	candidates []string
}

// maxIssues caps the issues NewSnapshot reports, like a compiler error list.
const maxIssues = 100

// NewSnapshot validates tools and builds an immutable Snapshot from a deep
// copy of them; later changes to tools or to anything they point to do not
// affect it. tools may be empty or nil. Every problem is reported at once
// (up to 100, then a count) as one *errcode.Error with code invalid_config,
// Message listing the issues and Details {"issues": []string}:
//
//   - an invalid Options.Separator;
//   - a descriptor Validate rejects (each of its issues, prefixed with the
//     tool's index and toolId);
//   - a duplicate toolId;
//   - an unknown Transport, or Transport / Server / Name inconsistent with
//     the toolId (see Tool);
//   - a server name that ValidServerName rejects, or that the separator
//     would make ambiguous: `<server><sep>` must contain the separator only
//     at its end, so with "__" neither `a__b` nor `fs_` is a server name
//     (`fs_` + `__` + `x` would read as server `fs`, tool `_x`).
//
// Spellings shared by several tools are not an error; Resolve refuses them
// as ambiguous_tool. NewSnapshot is safe for concurrent use.
func NewSnapshot(tools []Tool, opts Options) (*Snapshot, error) {
	var issues []string
	add := func(format string, args ...any) { issues = append(issues, fmt.Sprintf(format, args...)) }

	sep := opts.Separator
	if sep == "" {
		sep = DefaultSeparator
	}
	if !validSeparator(sep) {
		add("naming separator %q: want 1 to 16 bytes of [A-Za-z0-9_.-]", sep)
	}

	s := &Snapshot{
		sep:   sep,
		tools: make([]*Tool, 0, len(tools)),
		byID:  make(map[string]*Tool, len(tools)),
	}
	first := make(map[string]int, len(tools))
	for i := range tools {
		t := tools[i].Clone()
		id := t.Descriptor.ToolID
		for _, p := range append(t.Descriptor.issues(), routingIssues(&t, sep)...) {
			add("tools[%d] %q: %s", i, id, p)
		}
		if j, dup := first[id]; dup {
			add("tools[%d] %q: duplicate toolId (first at tools[%d])", i, id, j)
			continue
		}
		first[id] = i
		s.byID[id] = &t
		s.tools = append(s.tools, &t)
	}
	if len(issues) > 0 {
		return nil, snapshotError(issues)
	}
	slices.SortFunc(s.tools, func(a, b *Tool) int { return strings.Compare(a.Descriptor.ToolID, b.Descriptor.ToolID) })
	s.names = buildNames(s.tools, s.byID, sep)
	for sp, ids := range opts.Ambiguous {
		if _, canonical := s.byID[sp]; !canonical && sp != "" {
			ids = slices.Clone(ids)
			slices.Sort(ids)
			s.names[sp] = &resolution{candidates: slices.Compact(ids)}
		}
	}
	v, err := version(s.tools, sep)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidConfig, err, "hashing catalog")
	}
	s.version = v
	return s, nil
}

func snapshotError(issues []string) error {
	shown := issues
	more := ""
	if len(issues) > maxIssues {
		shown = issues[:maxIssues]
		more = fmt.Sprintf("; and %d more", len(issues)-maxIssues)
	}
	return &errcode.Error{
		Code:    errcode.InvalidConfig,
		Message: fmt.Sprintf("invalid tool catalog: %d issue(s): %s%s", len(issues), strings.Join(shown, "; "), more),
		Details: map[string]any{"issues": slices.Clone(shown)},
	}
}

// validSeparator reports whether sep is 1 to 16 bytes of [A-Za-z0-9_.-].
func validSeparator(sep string) bool {
	if sep == "" || len(sep) > 16 {
		return false
	}
	for i := 0; i < len(sep); i++ {
		if c := sep[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// routingIssues checks Transport, Server and Name against the toolId.
func routingIssues(t *Tool, sep string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	id := t.Descriptor.ToolID
	if !validToolName(t.Name) {
		add("name %q must be non-empty and use only [A-Za-z0-9_./-]", t.Name)
	}
	switch t.Transport {
	case TransportMCP:
		if err := ValidServerName(t.Server); err != nil {
			add("server: %s", errcode.As(err).Message)
		} else if strings.Index(t.Server+sep, sep) != len(t.Server) {
			add("server %q contains or ends in part of the naming separator %q, so %q would be ambiguous",
				t.Server, sep, t.Server+sep+t.Name)
		}
		if want := MCPToolID(t.Server, t.Name); id != want {
			add("an mcp transport tool on server %q named %q must have toolId %q", t.Server, t.Name, want)
		}
	case TransportNative, TransportHTTP:
		if t.Server != "" {
			add("server %q is set, but only mcp transport tools have a server", t.Server)
		}
		prefix := scopeNative
		if t.Transport == TransportHTTP {
			prefix = scopeHTTP
		}
		for _, other := range []string{scopeMCP, scopeNative, scopeHTTP} {
			if other != prefix && strings.HasPrefix(id, other) {
				add("a %s transport tool cannot have a %s toolId", t.Transport, strings.TrimSuffix(other, ":"))
			}
		}
		if rest, ok := strings.CutPrefix(id, prefix); ok && rest != t.Name {
			add("name %q must be the part after %q of the toolId, %q", t.Name, prefix, rest)
		}
	default:
		add("transport %q is not one of mcp, http, native", t.Transport)
	}
	return out
}

// spellings returns every non-canonical spelling of t, without duplicates
// and without t's own toolId.
func spellings(t *Tool, sep string) []string {
	var out []string
	if t.Transport == TransportMCP {
		out = append(out, t.Server+"."+t.Name, t.Server+sep+t.Name)
	}
	out = append(out, t.Name)
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(s string) bool { return s == t.Descriptor.ToolID })
}

// buildNames precomputes the outcome of every accepted spelling: canonical
// ids first (they always win), then every other spelling, ambiguous when
// shared by two or more tools. tools must be sorted by toolId.
func buildNames(tools []*Tool, byID map[string]*Tool, sep string) map[string]*resolution {
	names := make(map[string]*resolution, 4*len(tools))
	for id, t := range byID {
		names[id] = &resolution{tool: t}
	}
	owners := make(map[string][]*Tool, 3*len(tools))
	for _, t := range tools { // sorted, so each owners list is sorted too
		for _, sp := range spellings(t, sep) {
			if _, canonical := byID[sp]; canonical {
				continue
			}
			owners[sp] = append(owners[sp], t)
		}
	}
	for sp, ts := range owners {
		if len(ts) == 1 {
			names[sp] = &resolution{tool: ts[0]}
			continue
		}
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.Descriptor.ToolID
		}
		names[sp] = &resolution{candidates: ids}
	}
	return names
}

// versionDoc is what Version hashes (canonicalised with RFC 8785).
type versionDoc struct {
	Separator string        `json:"separator"`
	Tools     []versionTool `json:"tools"`
}

type versionTool struct {
	Descriptor ToolDescriptor `json:"descriptor"`
	Transport  Transport      `json:"transport"`
	Server     string         `json:"server"`
	Name       string         `json:"name"`
}

func version(tools []*Tool, sep string) (string, error) {
	doc := versionDoc{Separator: sep, Tools: make([]versionTool, len(tools))}
	for i, t := range tools {
		doc.Tools[i] = versionTool{t.Descriptor, t.Transport, t.Server, t.Name}
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	canon, err := canonjson.Canonicalize(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// Lookup returns the tool whose canonical toolId is exactly toolID, with no
// other spelling, decoding or normalisation. The returned Tool is shared and
// must not be modified. O(1), allocation-free; safe for concurrent use.
func (s *Snapshot) Lookup(toolID string) (*Tool, bool) {
	t, ok := s.byID[toolID]
	return t, ok
}

// Resolve maps a client-supplied tool name to its one tool (DESIGN.md
// decision 3). name may be the canonical toolId (`mcp:fs.read_file`,
// `native:clock.now`, `http:weather`, `x-host-acme-foo`), `<server>.<tool>`,
// the MCP-surface name `<server><sep><tool>`, the bare tool name (Tool.Name,
// for example `read_file` or `clock.now`), or a percent-encoded form of any
// of these, decoded once with url.PathUnescape (so `%253A` is not a colon).
// Precedence is in the package doc: an exact canonical toolId always wins;
// any other spelling shared by several tools is ambiguous.
//
// Errors, each an *errcode.Error:
//   - invalid_argument: name (or its decoded form) is empty, longer than
//     MaxNameLen bytes, not valid UTF-8 or contains a control character, or
//     its percent-encoding is malformed;
//   - ambiguous_tool: the spelling belongs to two or more tools; Message
//     names the candidates and Details are {"name": name, "candidates":
//     sorted canonical toolIds}. The candidates are every matching tool in
//     the snapshot, whatever the caller may see;
//   - not_found: no tool has that spelling ("unknown tool %q").
//
// The returned Tool is shared and must not be modified. One map lookup (two
// when the name needs decoding); allocation-free on success; safe for
// concurrent use.
func (s *Snapshot) Resolve(name string) (*Tool, error) {
	if err := checkSpelling(name); err != nil {
		return nil, err
	}
	if r, ok := s.names[name]; ok {
		return r.result(name)
	}
	if strings.IndexByte(name, '%') < 0 {
		return nil, notFound(name)
	}
	decoded, err := url.PathUnescape(name)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "tool name %q has malformed percent-encoding", name)
	}
	if err := checkSpelling(decoded); err != nil {
		return nil, err
	}
	if r, ok := s.names[decoded]; ok {
		return r.result(name)
	}
	return nil, notFound(name)
}

func (r *resolution) result(name string) (*Tool, error) {
	if r.tool != nil {
		return r.tool, nil
	}
	return nil, &errcode.Error{
		Code: errcode.AmbiguousTool,
		Message: fmt.Sprintf("tool name %q is ambiguous: it matches %s; use the toolId",
			name, strings.Join(r.candidates, ", ")),
		Details: map[string]any{"name": name, "candidates": slices.Clone(r.candidates)},
	}
}

func notFound(name string) error {
	return errcode.Errorf(errcode.NotFound, "unknown tool %q", name)
}

// Tools returns every tool sorted by canonical toolId (byte-wise), the
// order GET /v1/tools and tools/list use (RFC 0204 §D.13). The slice is a
// fresh copy the caller owns; the Tools it points to are shared and must not
// be modified. O(n); safe for concurrent use.
func (s *Snapshot) Tools() []*Tool { return slices.Clone(s.tools) }

// Len returns the number of tools. Safe for concurrent use.
func (s *Snapshot) Len() int { return len(s.tools) }

// Version returns the lowercase hex SHA-256 of the RFC 8785 canonical JSON
// of the separator and the tools sorted by toolId (each descriptor with its
// transport, server and name). Snapshots with equal content have equal
// versions whatever the input order, whitespace or key order inside the
// schemas; any change to a descriptor, a routing fact or the separator
// changes it. Safe for concurrent use.
func (s *Snapshot) Version() string { return s.version }

// Separator returns the MCP-surface separator in use (DefaultSeparator
// unless Options.Separator set another). Safe for concurrent use.
func (s *Snapshot) Separator() string { return s.sep }
