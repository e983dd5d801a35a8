package toolgate

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// Principal is who a call is attributed to: id, tenant, scopes, attributes.
type Principal = identity.Principal

// Call is one tool call request; see pipeline.Call for the fields. Tool may
// be any accepted spelling (canonical toolId, server.tool, server__tool,
// percent-encoded, or a bare name when unambiguous).
type Call = pipeline.Call

// Result is the outcome of a Call: Status ok | error | forbidden |
// rate_limited, Err set iff Status is not ok, Hidden when the tool is not
// disclosed to the principal (answer as for an unknown tool).
type Result = pipeline.Result

// NativeFunc is a native Go tool: it receives the call's arguments (a JSON
// object) and returns a JSON-marshalable result or an error. A returned
// *errcode.Error keeps its code; any other error is tool_execution_failed.
// It must honour ctx and be safe for concurrent use.
type NativeFunc func(ctx context.Context, args json.RawMessage) (any, error)

// Options configures a Gateway. The zero value is usable: no policy (every
// call denied, fail closed), in-memory rate limits, events and receipts, and
// an ephemeral signing key.
type Options struct {
	Policy          *policy.Program          // nil denies every call
	Classifications []catalog.Classification // descriptor facts per toolId glob (config `tools:`)
	Limiter         ratelimit.Limiter        // nil: in-process token buckets
	Events          audit.Log                // nil: audit.NewMemoryLog()
	Receipts        pipeline.ReceiptLog      // nil: in-memory chain (see Gateway.WriteReceipts)
	SigningKey      ed25519.PrivateKey       // nil: generated (ephemeral)
	Redactor        *audit.Redactor          // nil: key-name and shape rules only
	Hooks           []hook.Registration
	Now             func() time.Time // nil: time.Now
	Logger          *slog.Logger     // nil: discard
	AuditContent    string           // "hash" (default) or "full"
	ToolTimeout     time.Duration    // per invocation; default 60 s
	Separator       string           // MCP-surface name separator; default "__"
	// Approver makes require_approval calls wait for a person
	// (approval.Manager); nil answers them approval_required at once.
	Approver pipeline.Approver
	// Metrics receives each call's outcome and duration and each policy
	// decision (see internal/metrics; `toolgate serve` passes its
	// Prometheus registry); nil measures nothing.
	Metrics metrics.Recorder
	// Tracer, when set, traces every call with OpenTelemetry (an
	// execute_tool span per call, GenAI semantic conventions, child spans
	// per stage; never argument content); nil: no tracing work.
	Tracer trace.Tracer
	// Recordings stores recorded calls and answers replays (Call.Record,
	// Call.ReplayOf; README "Record and replay"): any store.Store, or
	// memstore for tests. nil: a call asking to record or replay is
	// refused (forbidden, details.reason recording_unavailable).
	Recordings store.Recordings
	// RecordScope is the scope a principal needs for Call.Record and
	// Call.ReplayOf (`toolgate serve`: audit.record_scope); "" lets no one.
	RecordScope string
	// ReadersScope lets a principal replay runs with other principals'
	// calls of its tenant (`toolgate serve`: audit.readers_scope); without
	// it only runs of its own calls (pipeline.Options.ReadersScope).
	ReadersScope string
}

// Gateway is the embeddable gate. All methods are safe for concurrent use.
type Gateway struct {
	p       *pipeline.Pipeline
	signer  *receipt.Signer
	events  audit.Log
	memRcpt *pipeline.MemoryReceipts

	mu       sync.Mutex // serialises catalog changes
	tools    []catalog.Tool
	invokers map[string]pipeline.Invoker
	policy   *policy.Program
	opts     Options
	// groups: per middleware, the toolIds it registered and their
	// descriptors' JSON (setGroup replaces them as a whole).
	groups map[string]map[string]string
}

// New returns a Gateway. Errors: invalid hook registrations, a bad key.
func New(opts Options) (*Gateway, error) {
	key := opts.SigningKey
	if key == nil {
		k, err := receipt.GenerateKey()
		if err != nil {
			return nil, err
		}
		key = k
	}
	signer := receipt.NewSigner(key)
	g := &Gateway{signer: signer, invokers: map[string]pipeline.Invoker{}, policy: opts.Policy, opts: opts}
	if opts.Limiter == nil {
		opts.Limiter = ratelimit.NewMemory(ratelimit.MemoryOptions{Now: opts.Now})
	}
	if opts.Events == nil {
		opts.Events = audit.NewMemoryLog()
	}
	g.events = opts.Events
	if opts.Receipts == nil {
		g.memRcpt = pipeline.NewMemoryReceipts(signer)
		opts.Receipts = g.memRcpt
	}
	p, err := pipeline.New(pipeline.Options{
		Limiter: opts.Limiter, Redactor: opts.Redactor, Events: opts.Events, Receipts: opts.Receipts,
		Hooks: opts.Hooks, Now: opts.Now, Logger: opts.Logger, AuditContent: opts.AuditContent, ToolTimeout: opts.ToolTimeout,
		Approver: opts.Approver, Metrics: opts.Metrics, Tracer: opts.Tracer,
		Recordings: opts.Recordings, RecordScope: opts.RecordScope, ReadersScope: opts.ReadersScope,
	})
	if err != nil {
		return nil, err
	}
	g.p = p
	if err := g.rebuild(); err != nil {
		return nil, err
	}
	return g, nil
}

// rebuild installs a new immutable state from the registered tools. Callers
// hold g.mu (or are New).
func (g *Gateway) rebuild() error {
	snap, err := catalog.NewSnapshot(g.tools, catalog.Options{Separator: g.opts.Separator})
	if err != nil {
		return err
	}
	inv := make(map[string]pipeline.Invoker, len(g.invokers))
	for k, v := range g.invokers {
		inv[k] = v
	}
	g.p.Swap(&pipeline.State{Catalog: snap, Policy: g.policy, Invokers: inv})
	return nil
}

// RegisterNative adds a native Go tool. The descriptor's toolId must be
// "native:<name>" (or a host-extension id "x-host-<vendor>-<name>");
// Classifications from Options are applied to it. Errors (code
// invalid_config): an invalid descriptor or a duplicate toolId.
func (g *Gateway) RegisterNative(d catalog.ToolDescriptor, fn NativeFunc) error {
	if fn == nil {
		return errcode.New(errcode.InvalidConfig, "RegisterNative: nil function")
	}
	catalog.Classify(&d, g.opts.Classifications)
	name := d.ToolID
	if len(name) > len("native:") && name[:len("native:")] == "native:" {
		name = name[len("native:"):]
	}
	// The digest of the declared definition, written to every receipt
	// (toolDigest). A descriptor that fails to normalize fails Validate in
	// rebuild anyway.
	dig, _ := catalog.DefinitionDigest(catalog.DescriptorDefinition(&d))
	t := catalog.Tool{Descriptor: d, Transport: catalog.TransportNative, Name: name, Digest: dig}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tools = append(g.tools, t)
	g.invokers[d.ToolID] = nativeInvoker(fn)
	if err := g.rebuild(); err != nil {
		g.tools = g.tools[:len(g.tools)-1]
		delete(g.invokers, d.ToolID)
		return err
	}
	return nil
}

// SetPolicy installs a new compiled policy atomically; nil denies every call.
func (g *Gateway) SetPolicy(p *policy.Program) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy = p
	return g.rebuild()
}

func nativeInvoker(fn NativeFunc) pipeline.Invoker { return pipeline.NativeInvoker(fn) }

// Disclose returns the descriptors of the tools principal may see, sorted by
// toolId: exactly those whose decision could be non-deny.
func (g *Gateway) Disclose(ctx context.Context, principal Principal) []catalog.ToolDescriptor {
	ts := g.p.Disclose(ctx, principal)
	out := make([]catalog.ToolDescriptor, len(ts))
	for i, t := range ts {
		out[i] = t.Descriptor
	}
	return out
}

// Call runs c through the gate. The error is non-nil only for a request that
// cannot be attributed to a tool (unknown or ambiguous tool: not_found or
// ambiguous_tool; malformed arguments: invalid_argument; no principal:
// unauthenticated). Every other outcome, including refusals, is a Result.
func (g *Gateway) Call(ctx context.Context, c Call) (*Result, error) {
	return g.p.Call(ctx, c)
}

// Explain returns the policy's per-rule explanation for (principal, tool, args).
func (g *Gateway) Explain(ctx context.Context, principal Principal, tool string, args json.RawMessage) (policy.Explanation, error) {
	ex, _, err := g.p.Explain(ctx, principal, tool, args)
	return ex, err
}

// PublicKey returns the receipt signing public key.
func (g *Gateway) PublicKey() ed25519.PublicKey { return g.signer.PublicKey() }

// Events returns the audit log the gateway writes to.
func (g *Gateway) Events() audit.Log { return g.events }

// WriteReceipts exports the in-memory receipts as JSON Lines (receipts and
// signed checkpoints; see package receipt). It fails when Options.Receipts
// was set (export from that store instead).
func (g *Gateway) WriteReceipts(w io.Writer) error {
	if g.memRcpt == nil {
		return errors.New("WriteReceipts: receipts go to a custom ReceiptLog")
	}
	_, err := g.memRcpt.WriteTo(w)
	return err
}

// Close releases resources. It is safe to call more than once.
func (g *Gateway) Close() error { return nil }

// setGroup replaces the tools a middleware registered under group with
// tools (each with its invoker), leaving every other tool as it is, and
// rebuilds the catalog only when the set changed. Classifications from
// Options are applied to each descriptor. Errors: an invalid descriptor or
// a toolId another group (or RegisterNative) already holds; the catalog is
// then unchanged. Safe for concurrent use.
func (g *Gateway) setGroup(group string, tools []catalog.Tool, inv pipeline.Invoker) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.groups == nil {
		g.groups = map[string]map[string]string{}
	}
	for i := range tools {
		catalog.Classify(&tools[i].Descriptor, g.opts.Classifications)
	}
	// Unchanged set (same ids, same descriptors): nothing to do.
	old := g.groups[group]
	if len(old) == len(tools) {
		same := true
		for _, t := range tools {
			raw, _ := json.Marshal(t.Descriptor)
			if old[t.Descriptor.ToolID] != string(raw) {
				same = false
				break
			}
		}
		if same {
			return nil
		}
	}
	prevTools, prevInv := g.tools, g.invokers
	kept := make([]catalog.Tool, 0, len(g.tools)+len(tools))
	for _, t := range g.tools {
		if _, mine := old[t.Descriptor.ToolID]; !mine {
			kept = append(kept, t)
		}
	}
	g.invokers = make(map[string]pipeline.Invoker, len(prevInv)+len(tools))
	for k, v := range prevInv {
		if _, mine := old[k]; !mine {
			g.invokers[k] = v
		}
	}
	now := make(map[string]string, len(tools))
	for _, t := range tools {
		raw, _ := json.Marshal(t.Descriptor)
		now[t.Descriptor.ToolID] = string(raw)
		g.invokers[t.Descriptor.ToolID] = inv
	}
	g.tools = append(kept, tools...)
	if err := g.rebuild(); err != nil {
		g.tools, g.invokers = prevTools, prevInv
		return err
	}
	g.groups[group] = now
	return nil
}
