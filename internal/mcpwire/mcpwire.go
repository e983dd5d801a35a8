// Package mcpwire is the one mapping of gate outcomes to MCP (DESIGN.md
// decision 5), shared by the gateway's MCP surface (internal/mcpgw) and the
// go-sdk middleware of the embedding facade (toolgate.ServerMiddleware,
// toolgate.ClientMiddleware), so that a refusal answers the same bytes
// whichever door the call came by. It is a leaf: it imports only the
// go-sdk and errcode.
package mcpwire

import (
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/errcode"
)

// Meta keys of tools/call (request and result _meta).
const (
	MetaRunID        = "toolgate/runId"
	MetaCallID       = "toolgate/callId"
	MetaReceiptID    = "toolgate/receiptId"
	MetaAgentID      = "toolgate/agentId"
	MetaParentCallID = "toolgate/parentCallId"
	// MetaError is the result _meta key of a gateway-made isError result
	// (a refusal or a gateway fault): {code, message, details?}, code
	// one of errcode's. It is not in structuredContent, which clients
	// validate against the tool's outputSchema (DESIGN.md decision 5).
	MetaError = "toolgate/error"
)

// UnknownTool is the JSON-RPC error MCP servers (the go-sdk) give for a
// tool they do not have (-32602, `unknown tool "<name>"`); undisclosed
// tools answer exactly the same (DESIGN.md decision 5). Pure.
func UnknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// ErrorResult is the isError result of a gate refusal or gateway fault
// (DESIGN.md decision 5): text content the model can read ("<code>:
// <message>") and _meta["toolgate/error"] = {code, message, details?}. It
// has no structuredContent: official clients (the TypeScript SDK) validate
// any structuredContent of a tool with an outputSchema against that schema
// and would turn the refusal into a -32602 error of their own. A nil e is
// internal_error. Pure.
func ErrorResult(e *errcode.Error) *mcp.CallToolResult {
	if e == nil {
		e = errcode.New(errcode.Internal, "the call failed")
	}
	obj := map[string]any{"code": string(e.Code), "message": e.Message}
	if len(e.Details) > 0 {
		obj["details"] = e.Details
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: string(e.Code) + ": " + e.Message}},
		Meta:    mcp.Meta{MetaError: obj},
	}
}
