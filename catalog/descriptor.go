package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// Source says what backs a tool: the OpenWOP v1 ToolDescriptor `source` enum
// (RFC 0078 §C).
type Source string

// The closed set of sources (OpenWOP tool-descriptor.schema.json `source`).
const (
	SourceNodePack      Source = "node-pack"
	SourceWorkflow      Source = "workflow"
	SourceMCP           Source = "mcp"
	SourceConnector     Source = "connector"
	SourceHostExtension Source = "host-extension"
)

// Valid reports whether s is one of the five OpenWOP v1 sources. Pure; safe
// for concurrent use.
func (s Source) Valid() bool {
	switch s {
	case SourceNodePack, SourceWorkflow, SourceMCP, SourceConnector, SourceHostExtension:
		return true
	}
	return false
}

// SafetyTier is a tool's data-effect classification, the OpenWOP v1
// `safetyTier` enum (RFC 0078 §C). The host assigns it explicitly; it is
// never derived from an approval or risk tier, nor from an MCP server's own
// annotations (RFC 0204).
type SafetyTier string

// The closed set of safety tiers. TierExec is allowed only with
// SourceHostExtension (RFC 0078 §C / RFC 0069).
const (
	TierPure  SafetyTier = "pure"
	TierRead  SafetyTier = "read"
	TierWrite SafetyTier = "write"
	TierExec  SafetyTier = "exec"
)

// Valid reports whether t is one of the four OpenWOP v1 safety tiers. Pure;
// safe for concurrent use.
func (t SafetyTier) Valid() bool {
	switch t {
	case TierPure, TierRead, TierWrite, TierExec:
		return true
	}
	return false
}

// Egress is a tool's outbound-network posture, the OpenWOP v1 `egress` enum
// (RFC 0078 §C).
type Egress string

// The closed set of egress postures.
const (
	EgressNone         Egress = "none"
	EgressSafeFetch    Egress = "safe-fetch"
	EgressHostMediated Egress = "host-mediated"
	EgressHostOwned    Egress = "host-owned"
)

// Valid reports whether e is one of the four OpenWOP v1 egress values (the
// empty "absent" value is not). Pure; safe for concurrent use.
func (e Egress) Valid() bool {
	switch e {
	case EgressNone, EgressSafeFetch, EgressHostMediated, EgressHostOwned:
		return true
	}
	return false
}

// Approval says whether invoking a tool needs an RFC 0051 approval, the
// OpenWOP v1 `approval` enum (RFC 0078 §C).
type Approval string

// The closed set of approval postures.
const (
	ApprovalNever       Approval = "never"
	ApprovalConditional Approval = "conditional"
	ApprovalAlways      Approval = "always"
)

// Valid reports whether a is one of the three OpenWOP v1 approval values.
// Pure; safe for concurrent use.
func (a Approval) Valid() bool {
	switch a {
	case ApprovalNever, ApprovalConditional, ApprovalAlways:
		return true
	}
	return false
}

// ReplayPolicy is a tool's replay posture, the OpenWOP v1 `replayPolicy`
// enum (RFC 0078 §C, replay.md).
type ReplayPolicy string

// The closed set of replay policies.
const (
	ReplayDeterministic    ReplayPolicy = "deterministic"
	ReplayIdempotent       ReplayPolicy = "idempotent"
	ReplayNonDeterministic ReplayPolicy = "non-deterministic"
)

// Valid reports whether r is one of the three OpenWOP v1 replay policies.
// Pure; safe for concurrent use.
func (r ReplayPolicy) Valid() bool {
	switch r {
	case ReplayDeterministic, ReplayIdempotent, ReplayNonDeterministic:
		return true
	}
	return false
}

// Hint is an advisory magnitude, the OpenWOP v1 `costHint` / `latencyHint`
// enum (RFC 0078 §C, non-normative).
type Hint string

// The closed set of hints.
const (
	HintLow    Hint = "low"
	HintMedium Hint = "medium"
	HintHigh   Hint = "high"
)

// Valid reports whether h is one of low, medium, high. Pure; safe for
// concurrent use.
func (h Hint) Valid() bool {
	switch h {
	case HintLow, HintMedium, HintHigh:
		return true
	}
	return false
}

// Auth is the closed OpenWOP v1 ToolDescriptor `auth` object (RFC 0078 §C):
// the RFC 0049 scopes a principal must hold (unique, non-empty UTF-8 strings,
// no whitespace) and whether the tool needs a host-stored credential reference
// (RFC 0046). It never carries credential material (SR-1).
type Auth struct {
	Scopes        []string `json:"scopes,omitempty"`
	CredentialRef bool     `json:"credentialRef,omitempty"`
}

// ToolDescriptor is exactly the OpenWOP v1 ToolDescriptor
// (tool-descriptor.schema.json, RFC 0078 §C), a closed object. Every value
// for which Validate returns nil marshals (encoding/json) to a document that
// validates against that schema: empty optional fields are omitted, and the
// three required fields (toolId, source, safetyTier) are always written.
//
// Secret-free by construction (RFC 0078 §C, SR-1): the struct has no field
// that could marshal to a banned key (`secret`, `credential`, `credentials`,
// `token`, `apiKey`, `password`), so a descriptor can never carry one as a
// descriptor key. InputSchema and OutputSchema are JSON Schemas of the tool's
// own arguments and results; they may legitimately declare a property named
// `token` and are not scanned for key names. Whoever fills them in must not
// put credential values (for example in `default` or `examples`) there.
//
// A ToolDescriptor is a plain value; it is safe for concurrent reads, and
// Validate and Annotations do not modify it.
type ToolDescriptor struct {
	ToolID       string          `json:"toolId"`
	Source       Source          `json:"source"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Auth         *Auth           `json:"auth,omitempty"`
	Egress       Egress          `json:"egress,omitempty"`
	Approval     Approval        `json:"approval,omitempty"`
	ReplayPolicy ReplayPolicy    `json:"replayPolicy,omitempty"`
	SafetyTier   SafetyTier      `json:"safetyTier"`
	CostHint     Hint            `json:"costHint,omitempty"`
	LatencyHint  Hint            `json:"latencyHint,omitempty"`

	// SkipArgsValidation is not part of the wire descriptor: when true the
	// gate does not validate a call's arguments against InputSchema (set by
	// Classify from a `tools:` entry with validate_args: false, for an
	// upstream whose schema is known to be wrong). Default false: every
	// call's arguments are validated (issue 13 point 6).
	SkipArgsValidation bool `json:"-"`

	// Record is not part of the wire descriptor: when true every call of
	// the tool is recorded (its redacted arguments and result stored for
	// replay, issue 18), whoever makes it. Set by Classify from a `tools:`
	// entry with record: true. Default false.
	Record bool `json:"-"`
}

// MaxNameLen is the longest toolId, tool name or client-supplied spelling, in
// bytes, that the catalog accepts. Longer input is refused with code
// invalid_argument.
const MaxNameLen = 512

// Canonical toolId scopes toolgate mints for its three transports.
const (
	scopeMCP    = "mcp:"
	scopeNative = "native:"
	scopeHTTP   = "http:"
	xHost       = "x-host-"
)

// MCPToolID returns the canonical toolId of tool on upstream MCP server
// server: "mcp:<server>.<tool>" (DESIGN.md Vocabulary). It does not validate
// its arguments; ValidServerName, ToolDescriptor.Validate and NewSnapshot do.
// Pure; safe for concurrent use.
func MCPToolID(server, tool string) string { return scopeMCP + server + "." + tool }

// MCPResourceID returns the canonical id of the resources of upstream MCP
// server server: "mcp:<server>/resource" (DESIGN.md Surfaces). One id
// covers every resource of the server; the resource's URI is an argument of
// each use (resources/read and resources/subscribe: args {uri}), so rules
// condition on args.uri. Not a tool: the catalog never holds it. Pure; safe
// for concurrent use.
func MCPResourceID(server string) string { return scopeMCP + server + "/resource" }

// MCPPromptID returns the canonical id of prompt prompt of upstream MCP
// server server: "mcp:<server>#<prompt>" (DESIGN.md Surfaces), with the
// prompt's name as the upstream lists it. Not a tool: the catalog never
// holds it. Pure; safe for concurrent use.
func MCPPromptID(server, prompt string) string { return scopeMCP + server + "#" + prompt }

// ParseTargetID splits a resource or prompt id of the MCP surfaces
// (MCPResourceID, MCPPromptID) into its server and prompt name. kind is
// "resource" (prompt empty), "prompt" (prompt may be empty for
// "mcp:<server>#", which callers refuse), or "" when id is neither: a tool
// id, another scheme, or a server name ValidServerName refuses. Pure; safe
// for concurrent use.
func ParseTargetID(id string) (server, prompt, kind string) {
	rest, ok := strings.CutPrefix(id, scopeMCP)
	if !ok {
		return "", "", ""
	}
	if s, p, found := strings.Cut(rest, "#"); found && ValidServerName(s) == nil {
		return s, p, "prompt"
	}
	if s, found := strings.CutSuffix(rest, "/resource"); found && ValidServerName(s) == nil {
		return s, "", "resource"
	}
	return "", "", ""
}

// NativeToolID returns the canonical toolId of a native Go tool:
// "native:<name>". It does not validate name. Pure; safe for concurrent use.
func NativeToolID(name string) string { return scopeNative + name }

// HTTPToolID returns the canonical toolId of an HTTP tool: "http:<name>". It
// does not validate name. Pure; safe for concurrent use.
func HTTPToolID(name string) string { return scopeHTTP + name }

// ValidServerName reports whether s is a valid upstream MCP server name:
// ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$ (so never a dot, a colon or '%'). It
// returns nil or an *errcode.Error with code invalid_argument. Whether s
// also avoids the MCP-surface separator depends on Options.Separator and is
// checked by NewSnapshot. Pure; safe for concurrent use.
func ValidServerName(s string) error {
	if s == "" {
		return errcode.New(errcode.InvalidArgument, "server name is empty")
	}
	ok := len(s) <= 32 && isAlnum(s[0])
	for i := 1; ok && i < len(s); i++ {
		c := s[i]
		ok = isAlnum(c) || c == '_' || c == '-'
	}
	if !ok {
		return errcode.Errorf(errcode.InvalidArgument,
			"invalid server name %q: want ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$", s)
	}
	return nil
}

// Validate checks d against the OpenWOP v1 ToolDescriptor schema and the RFC
// 0078 §C cross-field rules, plus toolgate's stricter identity rules, and
// reports every problem at once. It returns nil, or an *errcode.Error with
// code invalid_argument whose Message lists every issue and whose Details
// are {"toolId": d.ToolID, "issues": []string}. It checks:
//
//   - toolId: present, at most MaxNameLen bytes, and either
//     `<scope>:<name>` (scope: dot-separated lowercase labels
//     [a-z][a-z0-9-]*; name: [A-Za-z0-9_./-]+) or `x-host-<vendor>-<name>`
//     (vendor: [a-z0-9]+); an `mcp:` id must be `mcp:<server>.<tool>` with a
//     valid server name, and only an `mcp:` id may have source mcp; an
//     `x-host-` id must have source host-extension;
//   - source and safetyTier present and in their enums; egress, approval,
//     replayPolicy, costHint, latencyHint in their enums when set;
//   - safetyTier exec ⇒ source host-extension (RFC 0078 §C / RFC 0069);
//   - auth.scopes: each non-empty, valid UTF-8, free of whitespace and
//     control characters, and unique (the schema's uniqueItems);
//   - inputSchema / outputSchema, when set, are well-formed JSON objects.
//
// Banned secret key names cannot occur (see ToolDescriptor). Every
// descriptor Validate accepts is accepted by the schema; the converse holds
// except for the stricter identity and scope rules above. Pure; safe for
// concurrent use.
func (d *ToolDescriptor) Validate() error {
	issues := d.issues()
	if len(issues) == 0 {
		return nil
	}
	return &errcode.Error{
		Code:    errcode.InvalidArgument,
		Message: fmt.Sprintf("invalid tool descriptor %q: %s", d.ToolID, strings.Join(issues, "; ")),
		Details: map[string]any{"toolId": d.ToolID, "issues": issues},
	}
}

// issues returns every problem Validate reports, in a fixed order.
func (d *ToolDescriptor) issues() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if p := toolIDProblem(d.ToolID); p != "" {
		add("toolId: %s", p)
	} else {
		isMCP := strings.HasPrefix(d.ToolID, scopeMCP)
		if isMCP && d.Source != SourceMCP {
			add("toolId: an mcp: toolId needs source %q, not %q", SourceMCP, d.Source)
		}
		if !isMCP && d.Source == SourceMCP {
			add("toolId: source %q needs a toolId of the form mcp:<server>.<tool>", SourceMCP)
		}
		if strings.HasPrefix(d.ToolID, xHost) && d.Source != SourceHostExtension {
			add("toolId: an x-host- toolId needs source %q, not %q", SourceHostExtension, d.Source)
		}
	}
	switch {
	case d.Source == "":
		add("source: required")
	case !d.Source.Valid():
		add("source: %q is not one of node-pack, workflow, mcp, connector, host-extension", d.Source)
	}
	switch {
	case d.SafetyTier == "":
		add("safetyTier: required")
	case !d.SafetyTier.Valid():
		add("safetyTier: %q is not one of pure, read, write, exec", d.SafetyTier)
	case d.SafetyTier == TierExec && d.Source != SourceHostExtension:
		add("safetyTier: exec requires source %q, not %q (RFC 0078 §C)", SourceHostExtension, d.Source)
	}
	if d.Egress != "" && !d.Egress.Valid() {
		add("egress: %q is not one of none, safe-fetch, host-mediated, host-owned", d.Egress)
	}
	if d.Approval != "" && !d.Approval.Valid() {
		add("approval: %q is not one of never, conditional, always", d.Approval)
	}
	if d.ReplayPolicy != "" && !d.ReplayPolicy.Valid() {
		add("replayPolicy: %q is not one of deterministic, idempotent, non-deterministic", d.ReplayPolicy)
	}
	if d.CostHint != "" && !d.CostHint.Valid() {
		add("costHint: %q is not one of low, medium, high", d.CostHint)
	}
	if d.LatencyHint != "" && !d.LatencyHint.Valid() {
		add("latencyHint: %q is not one of low, medium, high", d.LatencyHint)
	}
	if d.Auth != nil {
		out = append(out, scopeIssues("auth.scopes", d.Auth.Scopes)...)
	}
	if len(d.InputSchema) > 0 && !isJSONObject(d.InputSchema) {
		add("inputSchema: must be a JSON object")
	}
	if len(d.OutputSchema) > 0 && !isJSONObject(d.OutputSchema) {
		add("outputSchema: must be a JSON object")
	}
	return out
}

// scopeIssues checks a scope list: non-empty entries without whitespace or
// control characters, no duplicates.
func scopeIssues(field string, scopes []string) []string {
	var out []string
	for i, s := range scopes {
		switch {
		case s == "":
			out = append(out, fmt.Sprintf("%s[%d]: empty scope", field, i))
		case !utf8.ValidString(s):
			// Invalid UTF-8 would marshal as U+FFFD and could collide with another scope.
			out = append(out, fmt.Sprintf("%s[%d]: scope %q is not valid UTF-8", field, i, s))
		case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			out = append(out, fmt.Sprintf("%s[%d]: scope %q contains whitespace or a control character", field, i, s))
		case slices.Index(scopes, s) < i:
			out = append(out, fmt.Sprintf("%s[%d]: duplicate scope %q", field, i, s))
		}
	}
	return out
}

// isJSONObject reports whether raw is well-formed JSON whose value is an object.
func isJSONObject(raw []byte) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(raw)
}

// toolIDProblem returns "" when id is a syntactically valid toolId, else a
// description of the first problem.
func toolIDProblem(id string) string {
	switch {
	case id == "":
		return "required"
	case len(id) > MaxNameLen:
		return fmt.Sprintf("longer than %d bytes", MaxNameLen)
	}
	scope, name, hasColon := strings.Cut(id, ":")
	if !hasColon {
		rest, ok := strings.CutPrefix(id, xHost)
		vendor, name, ok2 := strings.Cut(rest, "-")
		if !ok || !ok2 || vendor == "" || strings.IndexFunc(vendor, func(r rune) bool { return !isLowerAlnum(r) }) >= 0 || !validToolName(name) {
			return fmt.Sprintf("%q is neither <scope>:<name> nor x-host-<vendor>-<name>", id)
		}
		return ""
	}
	if !validScope(scope) {
		return fmt.Sprintf("scope %q of %q must be dot-separated labels [a-z][a-z0-9-]*", scope, id)
	}
	if !validToolName(name) {
		return fmt.Sprintf("name %q of %q must be non-empty and use only [A-Za-z0-9_./-]", name, id)
	}
	if scope+":" == scopeMCP {
		server, tool, ok := strings.Cut(name, ".")
		if !ok || tool == "" || ValidServerName(server) != nil {
			return fmt.Sprintf("%q is not mcp:<server>.<tool> with server ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$", id)
		}
	}
	return ""
}

// validScope reports whether s is dot-separated labels [a-z][a-z0-9-]*.
func validScope(s string) bool {
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || label[0] < 'a' || label[0] > 'z' {
			return false
		}
		if strings.IndexFunc(label, func(r rune) bool { return !isLowerAlnum(r) && r != '-' }) >= 0 {
			return false
		}
	}
	return true
}

// validToolName reports whether s is a non-empty tool name in the MCP
// SEP-986 alphabet [A-Za-z0-9_./-], at most MaxNameLen bytes.
func validToolName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' && c != '.' && c != '/' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLowerAlnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }

// Annotations are the four MCP tool annotation hints, projected from a
// descriptor's host-assigned fields per the RFC 0204 table (CONTRACT.md
// §2.7). All four are always present on the wire.
type Annotations struct {
	ReadOnlyHint    bool `json:"readOnlyHint"`
	DestructiveHint bool `json:"destructiveHint"`
	IdempotentHint  bool `json:"idempotentHint"`
	OpenWorldHint   bool `json:"openWorldHint"`
}

// Annotations projects d onto the MCP tool annotation hints (RFC 0204,
// CONTRACT.md §2.7), derived only from fields the host assigned, never from
// an upstream server's own annotations:
//
//   - readOnlyHint: safetyTier ∈ {pure, read}
//   - destructiveHint: safetyTier ∈ {write, exec}
//   - idempotentHint: replayPolicy ∈ {deterministic, idempotent}
//   - openWorldHint: egress absent or not none
//
// A missing or unknown safetyTier (which Validate rejects) is treated as
// write, the tier of an unclassified MCP tool: readOnly false, destructive
// true. Pure; safe for concurrent use.
func (d *ToolDescriptor) Annotations() Annotations {
	readOnly := d.SafetyTier == TierPure || d.SafetyTier == TierRead
	return Annotations{
		ReadOnlyHint:    readOnly,
		DestructiveHint: !readOnly,
		IdempotentHint:  d.ReplayPolicy == ReplayDeterministic || d.ReplayPolicy == ReplayIdempotent,
		OpenWorldHint:   d.Egress != EgressNone,
	}
}

// Clone returns a deep copy of d: Auth, Auth.Scopes, InputSchema and
// OutputSchema are copied, so changing the copy never changes d. Pure; safe
// for concurrent use with other readers of d.
func (d *ToolDescriptor) Clone() ToolDescriptor {
	c := *d
	c.InputSchema = bytes.Clone(d.InputSchema)
	c.OutputSchema = bytes.Clone(d.OutputSchema)
	if d.Auth != nil {
		a := *d.Auth
		a.Scopes = slices.Clone(d.Auth.Scopes)
		c.Auth = &a
	}
	return c
}

// checkSpelling returns nil when name is acceptable input for resolution:
// non-empty, at most MaxNameLen bytes, valid UTF-8 and free of control
// characters. Otherwise it returns an *errcode.Error with code
// invalid_argument.
func checkSpelling(name string) error {
	if name == "" {
		return errcode.New(errcode.InvalidArgument, "tool name is empty")
	}
	if len(name) > MaxNameLen {
		return errcode.Errorf(errcode.InvalidArgument, "tool name is longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return errcode.Errorf(errcode.InvalidArgument, "tool name %q contains a control character", name)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && size == 1 {
			return errcode.Errorf(errcode.InvalidArgument, "tool name %q is not valid UTF-8", name)
		}
		if unicode.IsControl(r) {
			return errcode.Errorf(errcode.InvalidArgument, "tool name %q contains a control character", name)
		}
		i += size
	}
	return nil
}
