package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/glob"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

// recordedArgs is where `policy diff` finds the redacted arguments of a
// recorded call (issue 18 point 1, recording): the store's recordings
// (storeRecordings), and the arguments an agent.toolCalled event carries
// itself (audit.content: full). args is the redacted JSON
// object; ok is false when the call was not recorded. Errors are the
// store's (AuditUnavailable, Cancelled, Timeout). Implementations must be
// tenant-scoped: a call of another tenant is not recorded for tenant.
type recordedArgs interface {
	RecordedArgs(ctx context.Context, tenant, callID string) (args json.RawMessage, ok bool, err error)
}

// recordsOf returns st's call recordings, nil when the store has none.
func recordsOf(st store.Store) recordedArgs {
	if r, ok := st.(recordedArgs); ok {
		return r
	}
	if r, ok := st.(store.Recordings); ok {
		return storeRecordings{r}
	}
	return nil
}

// storeRecordings reads a call's recorded arguments from the store's
// recordings (store.Recordings.RecordedCall, tenant-scoped).
type storeRecordings struct{ r store.Recordings }

func (s storeRecordings) RecordedArgs(ctx context.Context, tenant, callID string) (json.RawMessage, bool, error) {
	c, err := s.r.RecordedCall(ctx, tenant, callID)
	if errcode.CodeOf(err) == errcode.NotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return c.Args, len(c.Args) > 0, nil
}

// Diff group kinds.
const (
	diffChange       = "would_change"  // the candidate decides the call differently
	diffMayChange    = "may_change"    // the candidate's decision depends on arguments that were not recorded
	diffNotEvaluated = "not_evaluated" // the call cannot be decided again (unknown principal or tool)
)

// pastCall is one call read back from the store's events (and receipt).
type pastCall struct {
	called    audit.ToolCalled
	runID     string
	tenant    string
	at        time.Time
	returned  bool
	oldEffect policy.Effect
	oldRule   string
	oldKnown  bool   // oldEffect is known (a receipt or a toolReturned)
	version   string // the policy version that decided it ("" unknown)
}

// diffCallRef names one call in a group.
type diffCallRef struct {
	CallID    string    `json:"callId"`
	RunID     string    `json:"runId"`
	Principal string    `json:"principal"`
	At        time.Time `json:"timestamp"`
}

// diffGroup is the calls of one (kind, old rule → new rule, tool).
type diffGroup struct {
	Kind      string        `json:"kind"`
	ToolID    string        `json:"toolId"`
	OldEffect string        `json:"oldEffect,omitempty"`
	OldRule   string        `json:"oldRule"`
	NewEffect string        `json:"newEffect,omitempty"`
	NewRule   string        `json:"newRule"`
	Reason    string        `json:"reason,omitempty"`
	Count     int           `json:"count"`
	Calls     []diffCallRef `json:"calls"`
}

// diffReport is what `policy diff --json` prints.
type diffReport struct {
	Tenant       string      `json:"tenant"`
	Since        time.Time   `json:"since"`
	Candidate    string      `json:"candidate"`
	Calls        int         `json:"calls"`
	WouldChange  int         `json:"wouldChange"`
	MayChange    int         `json:"mayChange"`
	NotEvaluated int         `json:"notEvaluated"`
	Groups       []diffGroup `json:"groups"`
}

// candidate is the policy (and the configuration whose principals and tool
// classifications go with it) a diff evaluates.
type candidate struct {
	prog *policy.Program
	cfg  *config.Config
}

// loadCandidate reads a candidate: a whole toolgate configuration (it has a
// policy: key; its policy, principals and tools: classifications are used)
// or a policy document on its own (default, rules, ratelimits; cur's
// principals and classifications are used).
func loadCandidate(path string, cur *config.Config) (candidate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return candidate{}, usage("--candidate: %v", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return candidate{}, usage("--candidate %s: YAML: %v", path, err)
	}
	if len(root.Content) == 0 || (root.Content[0].Kind == yaml.MappingNode && len(root.Content[0].Content) == 0) ||
		(root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null") {
		// Not a deny-everything policy: an empty file is a mistake.
		return candidate{}, usage("--candidate %s: the file is empty (no policy: give a configuration or a policy document with rules)", path)
	}
	whole := false
	if len(root.Content) == 1 && root.Content[0].Kind == yaml.MappingNode {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			whole = whole || m.Content[i].Value == "policy"
		}
	}
	if whole {
		c, err := config.Load(path)
		if err != nil {
			return candidate{}, usage("--candidate %s: %v", path, err)
		}
		if c.Policy == nil {
			return candidate{}, usage("--candidate %s: the configuration has no policy", path)
		}
		return candidate{c.Policy, c}, nil
	}
	prog, err := policy.Load(path, data, policy.Options{})
	if err != nil {
		return candidate{}, usage("--candidate %s: %v", path, err)
	}
	return candidate{prog, cur}, nil
}

func newPolicyDiffCmd() *cobra.Command {
	var file, cand, since, tenant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff --config FILE --candidate NEW.yaml --tenant T [--since 7d] [--json]",
		Short: "List the past calls whose decision a candidate policy would change",
		Long: `Read the tenant's calls of the last --since (default 7d) from the configured store (its
agent.toolCalled / agent.toolReturned events, and each call's receipt for the decision and rule that
applied), decide each again under the candidate policy, and list every call whose effect (allow, deny,
require_approval) would change, grouped by (old rule → new rule, tool) with counts and call ids.
Nothing is executed and nothing is written.

The candidate is a whole configuration (its policy, principals and tools: classifications are used) or
a policy document on its own (default, rules, ratelimits; the --config file's principals and
classifications are used). Calls are decided with their recorded arguments when the call was
recorded (or the event carries its redacted inputs, audit.content: full); otherwise with the
arguments unknown, as at list time: a decision that does not depend on them is exact, one that does is
reported as "may change" unless the candidate decides the tool exactly as the policy that decided the
call (same rules for the tool, same default, same policy version). Redacted values stay redacted, so a
condition on a secret-shaped argument sees the redaction marker.

Principals are rebuilt from auth.api_keys (id and tenant as the event records them). A JWT
principal's scopes and attributes are not in the events, so its calls (and those of a key that was
removed) are listed as not evaluated, "unknown principal", as are calls of a tool whose server is no
longer configured. Reads are tenant-scoped, like audit tail: --tenant is required. Exit 0 whatever
changes; 1 when the store cannot be read; 2 for a usage error.`,
		Example: `  toolgate policy diff --config toolgate.yaml --candidate new-policy.yaml --tenant acme --since 7d`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(tenant) == "" {
				return usage("--tenant: empty; name the tenant whose calls to read (reads are tenant-scoped)")
			}
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			age, err := config.ParseDuration(since)
			if err != nil {
				return usage("--since: %v", err)
			}
			c, err := loadCandidate(cand, cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			from := time.Now().Add(-age).UTC()
			rep, err := policyDiff(ctx, st, recordsOf(st), cfg, c, tenant, from)
			if err != nil {
				return failure("policy diff: %v", err)
			}
			rep.Candidate = cand
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(rep)
			}
			writeDiffText(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required)")
	f.StringVar(&cand, "candidate", "", "candidate policy: a configuration or a policy document (required)")
	f.StringVar(&tenant, "tenant", "", "tenant whose calls to read (required)")
	f.StringVar(&since, "since", "7d", "how far back to read calls (e.g. 7d, 36h)")
	f.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	for _, r := range []string{"config", "candidate", "tenant"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}

// readPastCalls reads tenant's calls whose agent.toolCalled is at or after
// from, in commit order, with the decision each had: from its receipt when
// one is stored, else from its agent.toolReturned.
func readPastCalls(ctx context.Context, st store.Store, tenant string, from time.Time) ([]*pastCall, error) {
	var calls []*pastCall
	byID := map[string]*pastCall{}
	cursor := ""
	for {
		evs, next, err := st.EventsByTime(ctx, tenant, from, time.Time{}, cursor, store.MaxLimit)
		if err != nil {
			return nil, err
		}
		for i := range evs {
			e := &evs[i]
			switch e.Type {
			case audit.TypeToolCalled:
				var tc audit.ToolCalled
				if json.Unmarshal(e.Payload, &tc) != nil || tc.CallID == "" {
					continue
				}
				if _, dup := byID[tc.CallID]; dup {
					continue
				}
				pc := &pastCall{called: tc, runID: e.RunID, tenant: e.Tenant, at: e.Timestamp}
				byID[tc.CallID] = pc
				calls = append(calls, pc)
			case audit.TypeToolReturned:
				var tr audit.ToolReturned
				if json.Unmarshal(e.Payload, &tr) != nil {
					continue
				}
				if pc := byID[tr.Ref().CallID]; pc != nil && !pc.returned {
					pc.returned = true
					pc.oldEffect, pc.oldRule, pc.oldKnown = effectOfReturned(tr)
				}
			}
		}
		if next == "" || len(evs) == 0 {
			break
		}
		cursor = next
	}
	// Receipts carry the decision (effect, rule, policy version) of every
	// call, allowed ones too. They are read per chain and kept only for
	// this tenant's calls.
	if cl, ok := st.(store.ChainLister); ok && len(calls) > 0 {
		chains, err := cl.Chains(ctx)
		if err != nil {
			return nil, err
		}
		for _, ch := range chains {
			for seq := uint64(0); ; {
				rs, err := st.ReceiptsByChain(ctx, ch.ID, seq, store.MaxLimit)
				if err != nil {
					return nil, err
				}
				if len(rs) == 0 {
					break
				}
				for _, r := range rs {
					if pc := byID[r.CallID]; pc != nil && r.Tenant == tenant {
						pc.oldEffect, pc.oldRule, pc.oldKnown, pc.version = policy.Effect(r.Decision.Effect), r.Decision.RuleID, true, r.Decision.PolicyVersion
					}
				}
				seq = rs[len(rs)-1].Seq + 1
			}
		}
	}
	return calls, nil
}

// effectOfReturned infers the policy effect of a call from its
// agent.toolReturned (when its receipt is not available): a call that ran or
// was rate limited was allowed; a refusal names its rule in error.details.
func effectOfReturned(tr audit.ToolReturned) (policy.Effect, string, bool) {
	switch tr.Status() {
	case audit.StatusOK, audit.StatusError, audit.StatusRateLimited:
		return policy.EffectAllow, "", true
	}
	e := tr.Error()
	if e == nil {
		return policy.EffectDeny, "", true
	}
	rule, _ := e.Details["ruleId"].(string)
	switch errcode.Code(e.Code) {
	case errcode.ApprovalRequired, errcode.ApprovalDenied:
		return policy.EffectRequireApproval, rule, true
	case errcode.Forbidden:
		if _, hook := e.Details["hook"]; hook {
			return policy.EffectAllow, "", true
		}
	}
	return policy.EffectDeny, rule, true
}

// policyDiff decides every past call of tenant since from under c and
// groups those whose effect changes (or may change).
func policyDiff(ctx context.Context, st store.Store, rec recordedArgs, cur *config.Config, c candidate, tenant string, from time.Time) (diffReport, error) {
	rep := diffReport{Tenant: tenant, Since: from, Groups: []diffGroup{}}
	calls, err := readPastCalls(ctx, st, tenant, from)
	if err != nil {
		return rep, err
	}
	groups := map[string]*diffGroup{}
	add := func(g diffGroup, pc *pastCall) {
		key := strings.Join([]string{g.Kind, g.ToolID, g.OldEffect, g.OldRule, g.NewEffect, g.NewRule, g.Reason}, "\x00")
		have := groups[key]
		if have == nil {
			have = &g
			groups[key] = have
		}
		have.Count++
		have.Calls = append(have.Calls, diffCallRef{CallID: pc.called.CallID, RunID: pc.runID, Principal: pc.called.Principal, At: pc.at})
		switch g.Kind {
		case diffChange:
			rep.WouldChange++
		case diffMayChange:
			rep.MayChange++
		default:
			rep.NotEvaluated++
		}
	}
	for _, pc := range calls {
		if !pc.oldKnown {
			continue // in flight: neither returned nor receipted yet
		}
		rep.Calls++
		toolID := pc.called.ToolName
		base := diffGroup{ToolID: toolID, OldEffect: string(pc.oldEffect), OldRule: ruleLabel(pc.oldRule)}
		p, ok := principalOf(c.cfg, pc.called.Principal, pc.tenant)
		if !ok {
			base.Kind, base.NewRule = diffNotEvaluated, "?"
			base.Reason = fmt.Sprintf("unknown principal %q: not an auth.api_keys principal of tenant %q (a JWT principal's scopes and attributes are not recorded in events, or the key was removed)", pc.called.Principal, pc.tenant)
			add(base, pc)
			continue
		}
		d, err := descriptorFor(c.cfg, toolID)
		if err != nil {
			base.Kind, base.NewRule = diffNotEvaluated, "?"
			base.Reason = "unknown tool: " + strings.Replace(err.Error(), "--tool ", "tool ", 1)
			add(base, pc)
			continue
		}
		args, known, err := argsOf(ctx, rec, pc)
		if err != nil {
			return rep, err
		}
		in := policy.Input{Principal: p, Tool: pipeline.PolicyTool(&d), Args: args, ArgsKnown: known, Now: pc.at,
			Call: policy.Call{Transport: string(pc.called.Transport), CallID: pc.called.CallID, RunID: pc.runID,
				AgentID: pc.called.AgentID, ParentCallID: pc.called.ParentCallID}}
		dec := c.prog.Decide(ctx, &in)
		if !known && dec.Layer == policy.LayerError && dependsOnArgs(dec) {
			if !c.prog.Disclose(ctx, &in) {
				// Denied whatever the arguments (Disclose's invariant).
				if pc.oldEffect != policy.EffectDeny {
					base.Kind, base.NewEffect, base.NewRule = diffChange, string(policy.EffectDeny), "(depends on the arguments; deny for every value)"
					add(base, pc)
				}
				continue
			}
			if sameForTool(ctx, cur, c, &in, pc) {
				continue
			}
			base.Kind, base.NewRule = diffMayChange, "(depends on the arguments, which were not recorded)"
			add(base, pc)
			continue
		}
		if dec.Effect == pc.oldEffect {
			continue
		}
		base.Kind, base.NewEffect, base.NewRule = diffChange, string(dec.Effect), ruleLabel(dec.RuleID)
		if dec.Layer == policy.LayerScopes {
			base.Reason = dec.Reason
		}
		add(base, pc)
	}
	for _, g := range groups {
		rep.Groups = append(rep.Groups, *g)
	}
	kindOrder := map[string]int{diffChange: 0, diffMayChange: 1, diffNotEvaluated: 2}
	slices.SortFunc(rep.Groups, func(a, b diffGroup) int {
		if d := kindOrder[a.Kind] - kindOrder[b.Kind]; d != 0 {
			return d
		}
		for _, p := range [][2]string{{a.ToolID, b.ToolID}, {a.OldRule, b.OldRule}, {a.NewRule, b.NewRule}, {a.Reason, b.Reason}} {
			if c := strings.Compare(p[0], p[1]); c != 0 {
				return c
			}
		}
		return 0
	})
	return rep, nil
}

// dependsOnArgs reports whether a failed decision failed only because the
// arguments were unknown.
func dependsOnArgs(d policy.Decision) bool {
	e := errcode.As(d.Err)
	return e != nil && e.Details["cause"] == "args_unknown"
}

// argsOf returns a past call's recorded arguments: the recording's, else
// the redacted inputs its agent.toolCalled carries (audit.content: full).
func argsOf(ctx context.Context, rec recordedArgs, pc *pastCall) (map[string]any, bool, error) {
	raw := []byte(pc.called.Inputs)
	if rec != nil {
		r, ok, err := rec.RecordedArgs(ctx, pc.tenant, pc.called.CallID)
		if err != nil {
			return nil, false, err
		}
		if ok {
			raw = r
		}
	}
	if len(raw) == 0 {
		return nil, false, nil
	}
	m, err := parseArgs(string(raw))
	if err != nil {
		return nil, false, nil // not an object: decided as unknown
	}
	return m, true, nil
}

// principalOf rebuilds a past call's principal from the configured API keys.
func principalOf(cfg *config.Config, id, tenant string) (policy.Principal, bool) {
	for _, k := range cfg.Auth.APIKeys {
		if k.ID == id && k.Tenant == tenant {
			return policy.Principal{ID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes, Attributes: k.Attrs}, true
		}
	}
	return policy.Principal{}, false
}

// sameForTool reports whether the candidate decides toolID for pc's
// principal exactly as the policy that decided pc: that policy is the
// current one (same version), and the candidate has the same default, the
// same rules for the tool in the same order, the same descriptor and the
// same principal. The current policy must enforce (a policy in observe
// mode allows everything; the candidate here does not, since its decision
// depends on the arguments).
func sameForTool(ctx context.Context, cur *config.Config, c candidate, in *policy.Input, pc *pastCall) bool {
	toolID := in.Tool.ID
	if cur.Policy == nil || pc.version == "" || pc.version != cur.Policy.Version() || cur.Policy.Default() != c.prog.Default() {
		return false
	}
	if cur.Policy.Decide(ctx, in).Layer == policy.LayerObserve {
		return false
	}
	fp := func(p *policy.Program) string {
		var b bytes.Buffer
		for _, r := range p.Rules() {
			if slices.ContainsFunc(r.Tools, func(g string) bool { return glob.Match(g, toolID) }) {
				r.Pos = policy.Pos{}
				raw, _ := json.Marshal(r)
				b.Write(raw)
			}
		}
		return b.String()
	}
	if fp(cur.Policy) != fp(c.prog) {
		return false
	}
	d1, err1 := descriptorFor(cur, toolID)
	d2, err2 := descriptorFor(c.cfg, toolID)
	j1, _ := json.Marshal(d1)
	j2, _ := json.Marshal(d2)
	p1, ok1 := principalOf(cur, pc.called.Principal, pc.tenant)
	p2, ok2 := principalOf(c.cfg, pc.called.Principal, pc.tenant)
	q1, _ := json.Marshal(p1)
	q2, _ := json.Marshal(p2)
	return err1 == nil && err2 == nil && bytes.Equal(j1, j2) && ok1 && ok2 && bytes.Equal(q1, q2)
}

func ruleLabel(id string) string {
	if id == "" {
		return "(no rule)"
	}
	return id
}

func writeDiffText(w io.Writer, rep diffReport) {
	fmt.Fprintf(w, "policy diff: %d call(s) of tenant %q since %s under candidate %s\n", rep.Calls, rep.Tenant,
		rep.Since.Format(time.RFC3339), rep.Candidate)
	fmt.Fprintf(w, "would change: %d; may change: %d; not evaluated: %d\n", rep.WouldChange, rep.MayChange, rep.NotEvaluated)
	titles := map[string]string{
		diffChange:       "Would change",
		diffMayChange:    "May change (the candidate's decision depends on arguments that were not recorded)",
		diffNotEvaluated: "Not evaluated",
	}
	last := ""
	for _, g := range rep.Groups {
		if g.Kind != last {
			fmt.Fprintf(w, "\n%s:\n", titles[g.Kind])
			last = g.Kind
		}
		switch g.Kind {
		case diffNotEvaluated:
			// Groups differ by the old rule and effect: show them, so two
			// groups of one tool and reason are told apart.
			fmt.Fprintf(w, "  %s → ?  %s  %s → ?  %d call(s)\n    (%s)\n", g.OldRule, g.ToolID, g.OldEffect, g.Count, g.Reason)
		default:
			newEffect := g.NewEffect
			if newEffect == "" {
				newEffect = "?"
			}
			fmt.Fprintf(w, "  %s → %s  %s  %s → %s  %d call(s)\n", g.OldRule, g.NewRule, g.ToolID, g.OldEffect, newEffect, g.Count)
			if g.Reason != "" {
				fmt.Fprintf(w, "    (%s)\n", g.Reason)
			}
		}
		for _, cr := range g.Calls {
			fmt.Fprintf(w, "    call %s  run %s  principal %s  %s\n", cr.CallID, cr.RunID, cr.Principal, cr.At.UTC().Format(time.RFC3339Nano))
		}
	}
}
