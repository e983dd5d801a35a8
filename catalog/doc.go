// Package catalog holds toolgate's tool catalog: OpenWOP tool descriptors
// (RFC 0078 ToolDescriptor, v1 schema), their validation, their
// classification from the `tools:` configuration, and immutable snapshots
// that resolve every spelling a client may use to one canonical toolId
// (DESIGN.md decision 3).
//
// # Quick start
//
//	rules := []catalog.Classification{{Match: "mcp:fs.read_*", SafetyTier: catalog.TierRead}}
//	d := catalog.ToolDescriptor{ToolID: catalog.MCPToolID("fs", "read_file"), Source: catalog.SourceMCP}
//	catalog.Classify(&d, rules) // safetyTier: read; an unmatched MCP tool would get write
//	snap, err := catalog.NewSnapshot([]catalog.Tool{{
//		Descriptor: d, Transport: catalog.TransportMCP, Server: "fs", Name: "read_file",
//	}}, catalog.Options{})
//	if err != nil { ... } // *errcode.Error, code invalid_config, every issue listed
//	t, err := snap.Resolve("fs__read_file") // also "mcp:fs.read_file", "fs.read_file", "read_file", "mcp%3Afs.read_file"
//
// # Identity
//
// A toolId is `<scope>:<name>` (`mcp:<server>.<tool>`, `native:<name>`,
// `http:<name>`, `openwop:...`, `connector:...`, `<vendor>.<host>:...`) or a
// colon-free host-extension id `x-host-<vendor>-<name>`. Names use the MCP
// tool-name alphabet (SEP-986): ASCII letters, digits, `_`, `-`, `.` and `/`.
// Server names match ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$ and never contain a dot,
// so `mcp:fs.dir.list` is server `fs`, tool `dir.list`.
//
// # Resolution precedence
//
// Snapshot.Resolve accepts, for every tool: its canonical toolId; for an MCP
// tool also `<server>.<tool>`, `<server><sep>tool` (the MCP-surface name,
// separator "__" by default) and the bare upstream tool name; for any other
// tool its Name (for `native:clock.now` that is `clock.now`); and a
// percent-encoded form of any of these, decoded exactly once. Precedence:
//
//  1. An exact canonical toolId always resolves to that tool, even when the
//     same string is also some other tool's non-canonical spelling.
//  2. Every other spelling has equal rank: if it belongs to exactly one tool
//     it resolves to it; if it belongs to two or more tools (two servers'
//     `create_issue`, or `a.b` being both `mcp:a.b` and `native:a.b`) it is
//     refused with code ambiguous_tool naming every candidate toolId. A more
//     qualified spelling never silently beats a less qualified one.
//  3. The raw string is looked up first; only when it is not found and
//     contains '%' is it percent-decoded (url.PathUnescape) once and looked
//     up again. Since no valid toolId or name contains '%', the two lookups
//     can never disagree.
//
// # Concurrency and ownership
//
// Descriptor and classification functions are pure (no shared state). A
// Snapshot is immutable after NewSnapshot and safe for concurrent use; it
// deep-copies its input. The *Tool values it returns point into the snapshot
// and must be treated as read-only; call Tool.Clone for a private copy.
package catalog
