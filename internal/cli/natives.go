package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// nativeTool is a demo tool: descriptor and function.
type nativeTool struct {
	desc catalog.ToolDescriptor
	fn   func(context.Context, json.RawMessage) (any, error)
}

// demoTools are the built-in native demo tools (native:clock.now,
// native:text.echo, native:files.read confined to dir), used by `demo` and
// by the `serve` quick start.
func demoTools(dir string) []nativeTool {
	host := catalog.SourceHostExtension
	return []nativeTool{
		{catalog.ToolDescriptor{ToolID: "native:clock.now", Source: host, Title: "Current time", Description: "Returns the current UTC time.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
			func(context.Context, json.RawMessage) (any, error) {
				return map[string]string{"now": time.Now().UTC().Format(time.RFC3339)}, nil
			}},
		{catalog.ToolDescriptor{ToolID: "native:text.echo", Source: host, Title: "Echo", Description: "Returns its text argument.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
			func(_ context.Context, args json.RawMessage) (any, error) {
				var in struct {
					Text string `json:"text"`
				}
				if err := json.Unmarshal(args, &in); err != nil {
					return nil, errcode.Errorf(errcode.InvalidArgument, "text.echo: %v", err)
				}
				return map[string]string{"text": in.Text}, nil
			}},
		{catalog.ToolDescriptor{ToolID: "native:files.read", Source: host, Title: "Read a demo file", Description: "Reads a file from the demo directory.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
			func(_ context.Context, args json.RawMessage) (any, error) {
				var in struct {
					Name string `json:"name"`
				}
				if err := json.Unmarshal(args, &in); err != nil || in.Name == "" {
					return nil, errcode.New(errcode.InvalidArgument, "files.read: want {\"name\": \"<file>\"}")
				}
				root, err := os.OpenRoot(dir)
				if err != nil {
					return nil, err
				}
				defer root.Close()
				data, err := root.ReadFile(in.Name)
				if err != nil {
					return nil, fmt.Errorf("files.read: %w", err)
				}
				return map[string]string{"content": string(data)}, nil
			}},
	}
}

// nativeInvoker adapts a native function to the pipeline.
func nativeInvoker(fn func(context.Context, json.RawMessage) (any, error)) pipeline.Invoker {
	return pipeline.NativeInvoker(fn)
}
