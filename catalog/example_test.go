package catalog_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
)

func Example() {
	rules := []catalog.Classification{
		{Match: "mcp:fs.read_*", SafetyTier: catalog.TierRead, Scopes: []string{"fs:read"}, ReplayPolicy: catalog.ReplayIdempotent},
	}
	var tools []catalog.Tool
	for _, up := range []struct{ server, name string }{
		{"fs", "read_file"}, {"fs", "write_file"}, {"github", "create_issue"}, {"gitlab", "create_issue"},
	} {
		d := catalog.ToolDescriptor{ToolID: catalog.MCPToolID(up.server, up.name), Source: catalog.SourceMCP}
		catalog.Classify(&d, rules)
		tools = append(tools, catalog.Tool{Descriptor: d, Transport: catalog.TransportMCP, Server: up.server, Name: up.name})
	}
	snap, err := catalog.NewSnapshot(tools, catalog.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{"fs__read_file", "mcp%3Afs.write_file", "create_issue", "rm"} {
		t, err := snap.Resolve(name)
		if err != nil {
			fmt.Printf("%s: %s\n", name, errcode.CodeOf(err))
			continue
		}
		out, _ := json.Marshal(t.Descriptor)
		fmt.Printf("%s: %s %+v\n", name, out, t.Descriptor.Annotations())
	}
	// Output:
	// fs__read_file: {"toolId":"mcp:fs.read_file","source":"mcp","auth":{"scopes":["fs:read"]},"replayPolicy":"idempotent","safetyTier":"read"} {ReadOnlyHint:true DestructiveHint:false IdempotentHint:true OpenWorldHint:true}
	// mcp%3Afs.write_file: {"toolId":"mcp:fs.write_file","source":"mcp","safetyTier":"write"} {ReadOnlyHint:false DestructiveHint:true IdempotentHint:false OpenWorldHint:true}
	// create_issue: ambiguous_tool
	// rm: not_found
}
