package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// schemaPipeline has three allowed native tools: native:strict (n: integer,
// required), native:broken (an inputSchema that does not compile) and
// native:external (a $ref to a URL). ran counts invocations.
func schemaPipeline(t *testing.T, ran *int) *Pipeline {
	t.Helper()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: store.EventLog(ms), Receipts: store.ReceiptLog(ms)})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := policy.Parse("p.yaml", []byte("rules:\n- {id: all, effect: allow, tools: ['native:*']}\n"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool := func(id, schema string) catalog.Tool {
		return catalog.Tool{Descriptor: catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead,
			InputSchema: json.RawMessage(schema)}, Transport: catalog.TransportNative, Name: strings.TrimPrefix(id, "native:")}
	}
	snap, err := catalog.NewSnapshot([]catalog.Tool{
		tool("native:strict", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		tool("native:broken", `{"type":"object","properties":{"n":{"type":12}}}`),
		tool("native:external", `{"$ref":"https://example.invalid/schema.json"}`),
	}, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inv := NativeInvoker(func(_ context.Context, args json.RawMessage) (any, error) { *ran++; return args, nil })
	p.Swap(&State{Catalog: snap, Policy: prog, Invokers: map[string]Invoker{"native:strict": inv, "native:broken": inv, "native:external": inv}})
	return p
}

// TestArgsValidatedOnTheNativeDoor: the library door validates too; a
// schema that does not compile (or needs a remote document, which is never
// fetched) refuses the call with invalid_config rather than running it
// unchecked.
func TestArgsValidatedOnTheNativeDoor(t *testing.T) {
	ran := 0
	p := schemaPipeline(t, &ran)
	ctx := context.Background()
	who := policy.Principal{ID: "p", Tenant: "t"}
	for _, c := range []struct {
		tool, args string
		code       errcode.Code
	}{
		{"native:strict", `{}`, errcode.InvalidArgument},
		{"native:strict", `{"n":1.5}`, errcode.InvalidArgument},
		{"native:broken", `{"n":1}`, errcode.InvalidConfig},
		{"native:external", `{"n":1}`, errcode.InvalidConfig},
	} {
		res, err := p.Call(ctx, Call{Tool: c.tool, Args: json.RawMessage(c.args), Principal: who})
		if err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		if res.Status != audit.StatusError || res.Err == nil || res.Err.Code != c.code || res.Ran || res.ReceiptID == "" {
			t.Errorf("%s %s: %+v; want a recorded status error %s, not run", c.tool, c.args, res, c.code)
		}
	}
	if ran != 0 {
		t.Fatalf("%d calls ran with arguments that were not validated", ran)
	}
	res, err := p.Call(ctx, Call{Tool: "native:strict", Args: json.RawMessage(`{"n":2}`), Principal: who})
	if err != nil || res.Status != audit.StatusOK || ran != 1 {
		t.Fatalf("a valid call: %+v, %v (ran %d)", res, err, ran)
	}
}

// TestArgSchemasCompiledOncePerSnapshot: a new state with the same catalog
// snapshot (a policy reload) reuses the compiled schemas.
func TestArgSchemasCompiledOncePerSnapshot(t *testing.T) {
	ran := 0
	p := schemaPipeline(t, &ran)
	old := p.State()
	p.Swap(&State{Catalog: old.Catalog, Policy: old.Policy, Invokers: old.Invokers})
	if a, b := old.schemas["native:strict"].schema, p.State().schemas["native:strict"].schema; a == nil || a != b {
		t.Fatalf("schemas recompiled for the same snapshot (%p, %p)", a, b)
	}
}

// FuzzArgSchema: an upstream's inputSchema and a caller's arguments are
// both untrusted; compiling the one and validating the other never panics,
// and a failure is invalid_argument or invalid_config.
func FuzzArgSchema(f *testing.F) {
	f.Add(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, `{}`)
	f.Add(`{"type":"object","properties":{"a/b~c":{"type":"string"}},"required":["a/b~c"]}`, `{"x":1}`)
	f.Add(`{"$ref":"#/$defs/x","$defs":{"x":{"anyOf":[{"type":"string"},{"type":"array","items":{"const":1}}]}}}`, `[1,2]`)
	f.Add(`{"type":12}`, `{"n":1}`)
	f.Add(`{"$ref":"file:///etc/passwd"}`, `{}`)
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	p, err := New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: store.EventLog(ms), Receipts: store.ReceiptLog(ms)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, schema, args string) {
		st := &State{schemas: map[string]argSchema{"t": compileArgSchema([]byte(schema))}}
		e := p.validateArgs(st, "t", []byte(args))
		if e != nil && e.Code != errcode.InvalidArgument && e.Code != errcode.InvalidConfig {
			t.Fatalf("code %s", e.Code)
		}
	})
}
