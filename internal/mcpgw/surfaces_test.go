package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// Issue 12 point 1 and issue 13 point 2: resources, prompts and completions
// are gated, listed, refused and recorded like tools, in front of the real
// server-everything (resources, templates, prompts, completions), alone or
// next to server-filesystem (none of them) and a Go SDK server that
// advertises resources and prompts but fails to list them.

// API keys of the surface tests' principals (tenant acme): alice holds
// scope docs (every resource and prompt of everything), carol holds scope
// static (the static documents only), bob holds none (he may call
// everything's echo tool and nothing else).
const (
	keySurfAlice = "key-surf-alice"
	keySurfBob   = "key-surf-bob"
	keySurfCarol = "key-surf-carol"
)

// staticPrefix is the URI prefix of server-everything's static documents.
const staticPrefix = "demo://resource/static/"

// startFailingListsUpstream is a Go SDK server over Streamable HTTP that
// advertises resources and prompts (it has one of each) but answers every
// resources/list, resources/templates/list and prompts/list with an error.
func startFailingListsUpstream(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "broken-lists", Version: "1.0.0"}, nil)
	s.AddTool(&mcp.Tool{Name: "noop", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	s.AddResource(&mcp.Resource{Name: "r", URI: "broken://r"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "broken://r", Text: "r"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "p"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "resources/list", "resources/templates/list", "prompts/list":
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "listing is broken"}
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// surfacesConfig serves everything (and, with broken != "", fs and broken
// too) with prefixed names. Every principal may call everything.echo and
// fs.list_allowed_directories (so, before issue 12.1, each was shown every
// resource and prompt of those servers); broken's resources and prompts
// are granted to everyone.
func surfacesConfig(env e2eEnv, broken string) string {
	others := ""
	if broken != "" {
		others = fmt.Sprintf("  - {name: fs, command: [%s, %s, %s]}\n  - {name: broken, url: %s}\n",
			yamlQuote(env.npm.node), yamlQuote(env.npm.filesystem), yamlQuote(env.fsRoot), yamlQuote(broken))
	}
	return fmt.Sprintf(`naming: {prefix: always}
auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [docs]}
    - {id: bob, key_sha256: %q, tenant: %s}
    - {id: carol, key_sha256: %q, tenant: %s, scopes: [static]}
servers:
  - {name: everything, command: [%s, %s, stdio]}
%stools:
  - {match: "mcp:everything#resource-prompt", scopes: [secret]}
policy:
  default: deny
  rules:
    - {id: tools, effect: allow, tools: ["mcp:everything.echo", "mcp:fs.list_allowed_directories"]}
    - {id: docs, effect: allow, tools: ["mcp:everything/resource", "mcp:everything#*"], scopes: [docs]}
    - {id: static-docs, effect: allow, tools: ["mcp:everything/resource"], scopes: [static],
       when: '(has(args.uri) ? args.uri : args.ref.uri).startsWith(%q)'}
    - {id: broken, effect: allow, tools: ["mcp:broken/resource", "mcp:broken#*"]}
  ratelimits:
    - {tools: ["mcp:everything#args-prompt"], per: principal_tool, rate: 1/h, burst: 1}
`, auth.HashKey(keySurfAlice), tenant, auth.HashKey(keySurfBob), tenant, auth.HashKey(keySurfCarol), tenant,
		yamlQuote(env.npm.node), yamlQuote(env.npm.everything), others, staticPrefix)
}

func surfCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	t.Cleanup(cancel)
	return ctx
}

// listURIs is resources/list by URI, sorted; an error fails the test.
func listURIs(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for r, err := range cs.Resources(surfCtx(t), nil) {
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		out = append(out, r.URI)
	}
	slices.Sort(out)
	return out
}

// listTemplates is resources/templates/list by URI template.
func listTemplates(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for r, err := range cs.ResourceTemplates(surfCtx(t), nil) {
		if err != nil {
			t.Fatalf("resources/templates/list: %v", err)
		}
		out = append(out, r.URITemplate)
	}
	return out
}

// listPromptNames is prompts/list by name, sorted.
func listPromptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for p, err := range cs.Prompts(surfCtx(t), nil) {
		if err != nil {
			t.Fatalf("prompts/list: %v", err)
		}
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// wireError is err as the client saw it (code and message), with every
// occurrence of subject replaced by "X", so that two refusals of different
// names compare equal iff they answer alike.
func wireError(t *testing.T, err error, subject string) string {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("want a JSON-RPC error, got %v", err)
	}
	return fmt.Sprintf("%d %s %s", je.Code, strings.ReplaceAll(je.Message, subject, "X"), strings.ReplaceAll(string(je.Data), subject, "X"))
}

// gatedRecord is what the store holds about one gated request: its
// agent.toolCalled and agent.toolReturned payloads and its receipt.
type gatedRecord struct {
	callID, toolID, status, argsHash, transport string
	returned                                    bool
	receipt                                     bool
	receiptTool, receiptHash, receiptTransport  string
}

// sessionRecords reads every call recorded in run runID (a session's run)
// with its receipt, by callId.
func (e *e2eGateway) sessionRecords(t *testing.T, runID string) map[string]*gatedRecord {
	t.Helper()
	evs, err := e.st.EventsByRun(t.Context(), tenant, runID, -1, 0)
	if err != nil {
		t.Fatalf("events of run %s: %v", runID, err)
	}
	out := map[string]*gatedRecord{}
	for _, ev := range evs {
		var p struct {
			CallID    string `json:"callId"`
			ToolName  string `json:"toolName"`
			ArgsHash  string `json:"argsHash"`
			Transport string `json:"transport"`
			Status    string `json:"status"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.CallID == "" {
			continue
		}
		r := out[p.CallID]
		if r == nil {
			r = &gatedRecord{callID: p.CallID}
			out[p.CallID] = r
		}
		switch ev.Type {
		case audit.TypeToolCalled:
			r.toolID, r.argsHash, r.transport = p.ToolName, p.ArgsHash, p.Transport
		case audit.TypeToolReturned:
			r.returned, r.status = true, p.Status
		}
	}
	rs, err := e.st.ReceiptsByChain(t.Context(), e.st.ChainID(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rs {
		if r := out[rc.CallID]; r != nil {
			r.receipt, r.receiptTool, r.receiptHash, r.receiptTransport = true, rc.ToolID, rc.RequestedArgsHash, rc.Transport
		}
	}
	return out
}

// argsHash is the argsHash of params as the gateway computes it: the
// canonical JSON of the request params without _meta.
func argsHash(t *testing.T, params any) string {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	h, err := audit.NewRedactor().ArgsHash(raw)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantRecords checks that the run holds exactly the calls want (toolId →
// status → count, by argsHash) each paired (agent.toolCalled,
// agent.toolReturned) and receipted with transport mcp.
type wantRecord struct{ toolID, status, argsHash string }

func (e *e2eGateway) checkRecords(t *testing.T, runID string, want []wantRecord) {
	t.Helper()
	recs := e.sessionRecords(t, runID)
	var got []wantRecord
	for _, r := range recs {
		if !r.returned || !r.receipt {
			t.Errorf("call %s (%s): agent.toolReturned %v, receipt %v; want both", r.callID, r.toolID, r.returned, r.receipt)
		}
		if r.transport != "mcp" || r.receiptTransport != "mcp" || r.receiptTool != r.toolID || r.receiptHash != r.argsHash {
			t.Errorf("call %s: event {tool %s, transport %s, argsHash %s} and receipt {tool %s, transport %s, argsHash %s} disagree or are not mcp",
				r.callID, r.toolID, r.transport, r.argsHash, r.receiptTool, r.receiptTransport, r.receiptHash)
		}
		got = append(got, wantRecord{r.toolID, r.status, r.argsHash})
	}
	key := func(w wantRecord) string { return w.toolID + " " + w.status + " " + w.argsHash }
	gotKeys, wantKeys := make([]string, len(got)), make([]string, len(want))
	for i, w := range got {
		gotKeys[i] = key(w)
	}
	for i, w := range want {
		wantKeys[i] = key(w)
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("recorded calls of run %s:\n%s\nwant:\n%s", runID, strings.Join(gotKeys, "\n"), strings.Join(wantKeys, "\n"))
	}
}

// Issue 13 point 2: with server-filesystem (no resources, no prompts) and
// a server whose lists fail next to server-everything, resources/list,
// resources/templates/list and prompts/list answer everything's entries
// (they were -32601 for everyone: the first server without resources broke
// the whole list).
func TestSurfacesListsSkipServersWithout(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, surfacesConfig(env, startFailingListsUpstream(t)))
	for _, key := range []string{keySurfAlice, keySurfBob} {
		cs := e.connect(t, key)
		// bob may use a tool of fs and broken's resources and prompts; he
		// is shown none of everything's, and broken's lists fail.
		uris, tpl, prompts := listURIs(t, cs), listTemplates(t, cs), listPromptNames(t, cs)
		if key == keySurfBob {
			if len(uris)+len(tpl)+len(prompts) != 0 {
				t.Errorf("bob: resources %q, templates %q, prompts %q; want none", uris, tpl, prompts)
			}
			continue
		}
		if !slices.ContainsFunc(uris, func(u string) bool { return strings.HasPrefix(u, staticPrefix) }) || len(tpl) == 0 ||
			!slices.Contains(prompts, "everything__simple-prompt") {
			t.Errorf("alice: resources %q, templates %q, prompts %q; want everything's", uris, tpl, prompts)
		}
		if slices.Contains(uris, "broken://r") || slices.Contains(prompts, "broken__p") {
			t.Errorf("alice is shown entries of a server whose lists fail: %q %q", uris, prompts)
		}
		// Reads still route among several servers with resources.
		if _, err := cs.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/2"}); err != nil {
			t.Errorf("alice reads a templated resource of everything: %v", err)
		}
	}
}

// Issue 12 point 1: resources, prompts and completions are under the same
// decision, disclosure and audit as tools.
func TestSurfacesGatedAndRecorded(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, surfacesConfig(env, ""))
	hashURI := func(uri string) string { return argsHash(t, map[string]string{"uri": uri}) }

	// alice: every resource and prompt of everything.
	alice := e.connect(t, keySurfAlice)
	uris := listURIs(t, alice)
	var static []string
	for _, u := range uris {
		if strings.HasPrefix(u, staticPrefix) {
			static = append(static, u)
		}
	}
	if len(static) == 0 {
		t.Fatalf("alice's resources/list has no static document: %q", uris)
	}
	if tpl := listTemplates(t, alice); len(tpl) == 0 {
		t.Errorf("alice's resources/templates/list is empty")
	}
	prompts := listPromptNames(t, alice)
	for _, want := range []string{"everything__simple-prompt", "everything__completable-prompt"} {
		if !slices.Contains(prompts, want) {
			t.Errorf("alice's prompts/list = %q, want it to include %s", prompts, want)
		}
	}
	// A tools: classification gives a prompt scopes alice lacks.
	if slices.Contains(prompts, "everything__resource-prompt") {
		t.Errorf("alice is shown everything__resource-prompt, which needs scope secret")
	}
	doc := static[0]
	read, err := alice.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: doc})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].Text == "" {
		t.Fatalf("alice reads %s: %v %+v", doc, err, read)
	}
	if read.Meta[MetaReceiptID] == nil || read.Meta[MetaCallID] == nil {
		t.Errorf("resources/read result _meta lacks the call's ids: %v", read.Meta)
	}
	dynamic := "demo://resource/dynamic/text/1"
	if _, err := alice.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: dynamic}); err != nil {
		t.Errorf("alice reads %s (from a template): %v", dynamic, err)
	}
	got, err := alice.GetPrompt(surfCtx(t), &mcp.GetPromptParams{Name: "everything__simple-prompt"})
	if err != nil || len(got.Messages) == 0 {
		t.Fatalf("alice gets simple-prompt: %v %+v", err, got)
	}
	// A rate limit on a prompt: the second get is refused with a code the
	// client can read (she may see the prompt).
	ap := &mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Paris"}}
	if _, err := alice.GetPrompt(surfCtx(t), ap); err != nil {
		t.Fatalf("alice gets args-prompt: %v", err)
	}
	_, err = alice.GetPrompt(surfCtx(t), ap)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != CodeRefused || !strings.Contains(string(je.Data), `"code":"rate_limited"`) {
		t.Errorf("alice's second args-prompt: %v; want JSON-RPC %d with data.code rate_limited", err, CodeRefused)
	}
	hashAP := argsHash(t, map[string]any{"name": ap.Name, "arguments": ap.Arguments})
	cp := &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "everything__completable-prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Eng"}}
	comp, err := alice.Complete(surfCtx(t), cp)
	if err != nil || !slices.Contains(comp.Completion.Values, "Engineering") {
		t.Fatalf("alice completes department=Eng: %v %+v", err, comp)
	}
	if err := alice.Subscribe(surfCtx(t), &mcp.SubscribeParams{URI: doc}); err != nil {
		t.Errorf("alice subscribes to %s: %v", doc, err)
	}
	if err := alice.Unsubscribe(surfCtx(t), &mcp.UnsubscribeParams{URI: doc}); err != nil {
		t.Errorf("alice unsubscribes from %s: %v", doc, err)
	}
	tplRef := &mcp.CompleteReference{Type: "ref/resource", URI: "demo://resource/dynamic/text/{resourceId}"}
	rc := &mcp.CompleteParams{Ref: tplRef, Argument: mcp.CompleteParamsArgument{Name: "resourceId", Value: "3"}}
	if comp, err := alice.Complete(surfCtx(t), rc); err != nil || !slices.Contains(comp.Completion.Values, "3") {
		t.Errorf("alice completes resourceId=3 of %s: %v %+v", tplRef.URI, err, comp)
	}
	hashRC := argsHash(t, map[string]any{"ref": rc.Ref, "argument": rc.Argument})
	e.checkRecords(t, alice.ID(), []wantRecord{
		{"mcp:everything/resource", "ok", hashURI(doc)},
		{"mcp:everything/resource", "ok", hashURI(dynamic)},
		{"mcp:everything#simple-prompt", "ok", argsHash(t, map[string]any{"name": "everything__simple-prompt"})},
		{"mcp:everything#completable-prompt", "ok", argsHash(t, map[string]any{"ref": cp.Ref, "argument": cp.Argument})},
		{"mcp:everything/resource", "ok", hashURI(doc)}, // the subscription
		{"mcp:everything/resource", "ok", hashRC},
		{"mcp:everything#args-prompt", "ok", hashAP},
		{"mcp:everything#args-prompt", "rate_limited", hashAP},
	})
	// Content-free: the events carry no resource or prompt text.
	evs, err := e.st.EventsByRun(t.Context(), tenant, alice.ID(), -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), read.Contents[0].Text[:min(40, len(read.Contents[0].Text))]) {
			t.Errorf("event %s carries the resource's content: %s", ev.Type, ev.Payload)
		}
	}

	// bob may call everything's echo but was granted no resource or
	// prompt: he is shown none, and reading or getting one answers exactly
	// like an unknown one.
	bob := e.connect(t, keySurfBob)
	if u := listURIs(t, bob); len(u) != 0 {
		t.Errorf("bob's resources/list = %q, want none", u)
	}
	if tpl := listTemplates(t, bob); len(tpl) != 0 {
		t.Errorf("bob's resources/templates/list = %q, want none", tpl)
	}
	if p := listPromptNames(t, bob); len(p) != 0 {
		t.Errorf("bob's prompts/list = %q, want none", p)
	}
	_, errKnown := bob.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: doc})
	_, errUnknown := bob.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: staticPrefix + "no-such-document"})
	if errKnown == nil || errUnknown == nil {
		t.Fatalf("bob reads: known %v, unknown %v; want both refused", errKnown, errUnknown)
	}
	errKnownRes := errKnown
	if k, u := wireError(t, errKnown, doc), wireError(t, errUnknown, staticPrefix+"no-such-document"); k != u {
		t.Errorf("bob: an existing resource answers %q, an unknown one %q; want alike", k, u)
	}
	_, errKnown = bob.GetPrompt(surfCtx(t), &mcp.GetPromptParams{Name: "everything__simple-prompt"})
	_, errUnknown = bob.GetPrompt(surfCtx(t), &mcp.GetPromptParams{Name: "everything__no-such-prompt"})
	_, errNoServer := bob.GetPrompt(surfCtx(t), &mcp.GetPromptParams{Name: "nowhere__simple-prompt"})
	if errKnown == nil || errUnknown == nil || errNoServer == nil {
		t.Fatalf("bob gets prompts: known %v, unknown %v, no server %v; want all refused", errKnown, errUnknown, errNoServer)
	}
	k := wireError(t, errKnown, "everything__simple-prompt")
	if u := wireError(t, errUnknown, "everything__no-such-prompt"); k != u {
		t.Errorf("bob: an existing prompt answers %q, an unknown one %q; want alike", k, u)
	}
	if u := wireError(t, errNoServer, "nowhere__simple-prompt"); k != u {
		t.Errorf("bob: an existing prompt answers %q, one of no server %q; want alike", k, u)
	}
	if _, err := bob.Complete(surfCtx(t), cp); err == nil {
		t.Errorf("bob completes a prompt argument he may not see")
	} else if c := wireError(t, err, "everything__completable-prompt"); c != k {
		t.Errorf("bob's completion answers %q, want %q (as an unknown prompt)", c, k)
	}
	if err := bob.Subscribe(surfCtx(t), &mcp.SubscribeParams{URI: doc}); err == nil {
		t.Errorf("bob subscribes to %s", doc)
	}
	if err := bob.Unsubscribe(surfCtx(t), &mcp.UnsubscribeParams{URI: doc}); err == nil {
		t.Errorf("bob's unsubscribe from %s reached the upstream", doc)
	} else if u := wireError(t, err, doc); u != wireError(t, errKnownRes, doc) {
		t.Errorf("bob's unsubscribe answers %q, want it like an unknown resource", u)
	}
	// Every refusal is recorded: forbidden, paired, receipted (a prompt
	// of no server is not: like an unknown tool).
	e.checkRecords(t, bob.ID(), []wantRecord{
		{"mcp:everything/resource", "forbidden", hashURI(doc)},
		{"mcp:everything/resource", "forbidden", hashURI(staticPrefix + "no-such-document")},
		{"mcp:everything#simple-prompt", "forbidden", argsHash(t, map[string]any{"name": "everything__simple-prompt"})},
		{"mcp:everything#no-such-prompt", "forbidden", argsHash(t, map[string]any{"name": "everything__no-such-prompt"})},
		{"mcp:everything#completable-prompt", "forbidden", argsHash(t, map[string]any{"ref": cp.Ref, "argument": cp.Argument})},
		{"mcp:everything/resource", "forbidden", hashURI(doc)}, // the subscription
	})

	// carol: a rule conditioned on args.uri filters the list per URI and
	// the reads alike.
	carol := e.connect(t, keySurfCarol)
	if cu := listURIs(t, carol); !slices.Equal(cu, static) {
		t.Errorf("carol's resources/list = %q\nwant exactly the static documents %q", cu, static)
	}
	if _, err := carol.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: doc}); err != nil {
		t.Errorf("carol reads %s: %v", doc, err)
	}
	_, errDyn := carol.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: dynamic})
	_, errUnknown = carol.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/no-such"})
	if errDyn == nil || errUnknown == nil {
		t.Fatalf("carol reads outside the static documents: %v, %v; want both refused", errDyn, errUnknown)
	}
	if d, u := wireError(t, errDyn, dynamic), wireError(t, errUnknown, "demo://resource/dynamic/text/no-such"); d != u {
		t.Errorf("carol: a resource outside her rule answers %q, an unknown one %q; want alike", d, u)
	}
	// Dot segments do not leave the prefix her rule names: the upstream
	// would resolve them (raw or percent-encoded) to a dynamic resource.
	for _, escape := range []string{staticPrefix + "../dynamic/text/1", staticPrefix + "%2e%2e/dynamic/text/1",
		staticPrefix + "%2E./dynamic/blob/2", staticPrefix + "./../dynamic/text/1"} {
		res, err := carol.ReadResource(surfCtx(t), &mcp.ReadResourceParams{URI: escape})
		if err == nil {
			t.Errorf("carol reads %s: %+v; want it refused", escape, res)
		} else if w, u := wireError(t, err, escape), wireError(t, errUnknown, "demo://resource/dynamic/text/no-such"); w != u {
			t.Errorf("carol's %s answers %q, want it like an unknown resource %q", escape, w, u)
		}
		if err := carol.Subscribe(surfCtx(t), &mcp.SubscribeParams{URI: escape}); err == nil {
			t.Errorf("carol subscribes to %s", escape)
		}
	}
	if p := listPromptNames(t, carol); len(p) != 0 {
		t.Errorf("carol's prompts/list = %q, want none", p)
	}
	if _, err := carol.Complete(surfCtx(t), rc); err == nil {
		t.Errorf("carol completes %s, outside her rule", tplRef.URI)
	} else if c := wireError(t, err, tplRef.URI); c != wireError(t, errUnknown, "demo://resource/dynamic/text/no-such") {
		t.Errorf("carol's refused completion answers %q, want it like an unknown resource", c)
	}
	e.checkRecords(t, carol.ID(), []wantRecord{
		{"mcp:everything/resource", "forbidden", hashRC},
		{"mcp:everything/resource", "ok", hashURI(doc)},
		{"mcp:everything/resource", "forbidden", hashURI(dynamic)},
		{"mcp:everything/resource", "forbidden", hashURI("demo://resource/dynamic/text/no-such")},
	})
}

// A reload that changes the policy tells every session that its resource
// and prompt lists may have changed, and the lists follow the new policy.
func TestSurfacesListChangedOnReload(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	yaml := surfacesConfig(env, "")
	e := startGateway(t, yaml)
	resChanged, promptsChanged := make(chan struct{}, 16), make(chan struct{}, 16)
	bob := e.connectWith(t, keySurfBob, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resChanged <- struct{}{} },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { promptsChanged <- struct{}{} },
	})
	if u := listURIs(t, bob); len(u) != 0 {
		t.Fatalf("bob's resources/list before the reload = %q, want none", u)
	}
	grant := strings.Replace(yaml, "  rules:\n", "  rules:\n    - {id: everyone-docs, effect: allow, tools: [\"mcp:everything/resource\", \"mcp:everything#*\"]}\n", 1)
	cfg, err := config.Parse("test.yaml", []byte(grant))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Reload(cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	for name, ch := range map[string]chan struct{}{"resources": resChanged, "prompts": promptsChanged} {
		select {
		case <-ch:
		case <-surfCtx(t).Done():
			t.Fatalf("no notifications/%s/list_changed after the reload", name)
		}
	}
	if u := listURIs(t, bob); !slices.ContainsFunc(u, func(s string) bool { return strings.HasPrefix(s, staticPrefix) }) {
		t.Errorf("bob's resources/list after the reload = %q, want everything's", u)
	}
	if p := listPromptNames(t, bob); !slices.Contains(p, "everything__simple-prompt") {
		t.Errorf("bob's prompts/list after the reload = %q, want everything's", p)
	}
}
