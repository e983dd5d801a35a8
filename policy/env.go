package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// CEL type names of the typed condition variables.
const (
	principalTypeName = "toolgate.Principal"
	callTypeName      = "toolgate.Call"
	toolTypeName      = "toolgate.Tool"
	toolAuthTypeName  = "toolgate.ToolAuth"
)

// maxWhenLen bounds a condition's source (characters) so that a hostile or
// broken document cannot make compilation expensive.
const maxWhenLen = 4096

// objField is one field of a typed condition variable. get returns the
// field's value (a ref.Val or a natively qualifiable Go value) and false
// when obj is not of the field's type.
type objField struct {
	typ *types.Type
	get func(obj any) (any, bool)
	set func(obj any) bool
}

// objType describes principal or call to the CEL checker and runtime: a
// struct type with a fixed set of fields, so a typo such as principal.idd is
// a compile-time issue and principal.id is statically a string. It
// implements ref.Type and types.StructTypeDescriptor. Runtime values are
// *principalView and *callView (see activation).
type objType struct {
	name    string
	celType *types.Type
	rtype   reflect.Type
	names   []string
	fields  map[string]*objField
	fts     map[string]*types.FieldType
}

func newObjType(name string, rtype reflect.Type, fields map[string]*objField) *objType {
	t := &objType{
		name:    name,
		celType: types.NewObjectType(name, traits.IndexerType, traits.FieldTesterType),
		rtype:   rtype,
		fields:  fields,
		names:   slices.Sorted(maps.Keys(fields)),
		fts:     make(map[string]*types.FieldType, len(fields)),
	}
	for name, f := range fields {
		get := f.get
		t.fts[name] = &types.FieldType{
			Type:  f.typ,
			IsSet: f.set,
			GetFrom: func(obj any) (any, error) {
				if v, ok := get(obj); ok {
					return v, nil
				}
				return nil, fmt.Errorf("%s: unexpected value of type %T", t.name, obj)
			},
		}
	}
	return t
}

// HasTrait implements ref.Type.
func (t *objType) HasTrait(trait int) bool {
	return trait == traits.IndexerType || trait == traits.FieldTesterType
}

// TypeName implements ref.Type.
func (t *objType) TypeName() string { return t.name }

// ReflectType implements types.StructTypeDescriptor.
func (t *objType) ReflectType() reflect.Type { return t.rtype }

// FieldNames implements types.StructTypeDescriptor.
func (t *objType) FieldNames() []string { return t.names }

// FindFieldType implements types.StructTypeDescriptor.
func (t *objType) FindFieldType(name string) (*types.FieldType, bool) {
	ft, ok := t.fts[name]
	return ft, ok
}

// NewValue implements types.StructTypeDescriptor: conditions may not
// construct principals or calls.
func (t *objType) NewValue(types.Adapter, map[string]ref.Val) ref.Val {
	return types.NewErr("%s values cannot be constructed in a condition", t.name)
}

// Adapt implements types.StructTypeDescriptor.
func (t *objType) Adapt(_ types.Adapter, value any) ref.Val {
	if value == nil || reflect.TypeOf(value) != t.rtype {
		return types.NewErr("%s: unexpected value of type %T", t.name, value)
	}
	return &objVal{t: t, v: value}
}

// objVal is a principal or call as a CEL value; v is *principalView or
// *callView.
type objVal struct {
	t *objType
	v any
}

// ConvertToNative implements ref.Val.
func (o *objVal) ConvertToNative(rt reflect.Type) (any, error) {
	if reflect.TypeOf(o.v).AssignableTo(rt) {
		return o.v, nil
	}
	return nil, fmt.Errorf("%s cannot be converted to %v", o.t.name, rt)
}

// ConvertToType implements ref.Val.
func (o *objVal) ConvertToType(tv ref.Type) ref.Val {
	switch {
	case tv == types.TypeType:
		return o.t.celType
	case tv.TypeName() == o.t.name:
		return o
	}
	return types.NewErr("type conversion error from %s to %s", o.t.name, tv.TypeName())
}

// Equal implements ref.Val: two values of the same type are equal when all
// their fields are.
func (o *objVal) Equal(other ref.Val) ref.Val {
	ov, ok := other.(*objVal)
	if !ok || ov.t != o.t {
		return types.False
	}
	for _, name := range o.t.names {
		if o.Get(types.String(name)).Equal(ov.Get(types.String(name))) != types.True {
			return types.False
		}
	}
	return types.True
}

// Type implements ref.Val.
func (o *objVal) Type() ref.Type { return o.t.celType }

// Value implements ref.Val.
func (o *objVal) Value() any { return o.v }

// Get implements traits.Indexer (field access on a dynamically typed value).
func (o *objVal) Get(index ref.Val) ref.Val {
	name, ok := index.(types.String)
	if !ok {
		return types.ValOrErr(index, "no such overload")
	}
	f, ok := o.t.fields[string(name)]
	if !ok {
		return types.NewErr("no such field '%s'", name)
	}
	v, _ := f.get(o.v)
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// IsSet implements traits.FieldTester.
func (o *objVal) IsSet(field ref.Val) ref.Val {
	name, ok := field.(types.String)
	if !ok {
		return types.ValOrErr(field, "no such overload")
	}
	f, ok := o.t.fields[string(name)]
	if !ok {
		return types.NewErr("no such field '%s'", name)
	}
	return types.Bool(f.set(o.v))
}

// principalView is the runtime value of `principal`: the caller's Principal
// plus the CEL values of its fields, converted on first use and kept for
// the rest of the evaluation.
type principalView struct {
	p                  *Principal
	id, tenant, scopes ref.Val
}

// callView is the runtime value of `call`.
type callView struct {
	c      *Call
	fields [5]ref.Val
}

func principalField(get func(pv *principalView) any, set func(p *Principal) bool, typ *types.Type) *objField {
	return &objField{
		typ: typ,
		get: func(obj any) (any, bool) {
			pv, ok := obj.(*principalView)
			if !ok {
				return nil, false
			}
			return get(pv), true
		},
		set: func(obj any) bool {
			pv, ok := obj.(*principalView)
			return ok && set(pv.p)
		},
	}
}

func callField(i int, get func(c *Call) string) *objField {
	return &objField{
		typ: types.StringType,
		get: func(obj any) (any, bool) {
			cv, ok := obj.(*callView)
			if !ok {
				return nil, false
			}
			if cv.fields[i] == nil {
				cv.fields[i] = types.String(get(cv.c))
			}
			return cv.fields[i], true
		},
		set: func(obj any) bool {
			cv, ok := obj.(*callView)
			return ok && get(cv.c) != ""
		},
	}
}

// toolView is the runtime value of `tool`: the Input's Tool plus the CEL
// values of its fields, converted on first use.
type toolView struct {
	t      *Tool
	fields [len(toolFieldNames)]ref.Val
	auth   toolAuthView
}

// toolAuthView is the runtime value of `tool.auth`.
type toolAuthView struct{ tv *toolView }

// toolFieldNames are the string fields of `tool` besides id, scopes, auth
// and the schemas: the OpenWOP ToolDescriptor's (RFC 0078) plus its
// toolId.
var toolFieldNames = [...]string{"toolId", "source", "title", "description", "egress", "approval",
	"replayPolicy", "safetyTier", "costHint", "latencyHint", "id", "scopes", "inputSchema", "outputSchema"}

// toolString returns the descriptor's string field name: Source and
// SafetyTier from the typed fields when set, else the string in Fields
// ("" when absent or not a string).
func toolString(t *Tool, name string) string {
	switch name {
	case "id":
		return t.ID
	case "toolId":
		if t.ID != "" {
			return t.ID
		}
	case "source":
		if t.Source != "" {
			return t.Source
		}
	case "safetyTier":
		if t.SafetyTier != "" {
			return t.SafetyTier
		}
	}
	v, _ := t.Fields[name].(string)
	return v
}

func toolStringField(i int, name string) *objField {
	return &objField{
		typ: types.StringType,
		get: func(obj any) (any, bool) {
			tv, ok := obj.(*toolView)
			if !ok {
				return nil, false
			}
			if tv.fields[i] == nil {
				tv.fields[i] = types.String(toolString(tv.t, name))
			}
			return tv.fields[i], true
		},
		set: func(obj any) bool {
			tv, ok := obj.(*toolView)
			return ok && toolString(tv.t, name) != ""
		},
	}
}

// toolScopes is the descriptor's auth.scopes.
func toolScopes(tv *toolView) ref.Val {
	const i = 11
	if tv.fields[i] == nil {
		sc := tv.t.Scopes
		if sc == nil {
			sc = []string{}
		}
		tv.fields[i] = types.NewStringList(types.DefaultTypeAdapter, sc)
	}
	return tv.fields[i]
}

func toolSchemaField(i int, name string) *objField {
	return &objField{
		typ: types.DynType,
		get: func(obj any) (any, bool) {
			tv, ok := obj.(*toolView)
			if !ok {
				return nil, false
			}
			if tv.fields[i] == nil {
				v, ok := tv.t.Fields[name]
				if !ok {
					v = map[string]any{}
				}
				tv.fields[i] = types.DefaultTypeAdapter.NativeToValue(v)
			}
			return tv.fields[i], true
		},
		set: func(obj any) bool {
			tv, ok := obj.(*toolView)
			if !ok {
				return false
			}
			_, present := tv.t.Fields[name]
			return present
		},
	}
}

func toolFields() map[string]*objField {
	m := make(map[string]*objField, len(toolFieldNames)+1)
	for i, name := range toolFieldNames {
		switch name {
		case "scopes":
			m[name] = &objField{
				typ: types.NewListType(types.StringType),
				get: func(obj any) (any, bool) {
					tv, ok := obj.(*toolView)
					if !ok {
						return nil, false
					}
					return toolScopes(tv), true
				},
				set: func(obj any) bool {
					tv, ok := obj.(*toolView)
					return ok && len(tv.t.Scopes) > 0
				},
			}
		case "inputSchema", "outputSchema":
			m[name] = toolSchemaField(i, name)
		default:
			m[name] = toolStringField(i, name)
		}
	}
	m["auth"] = &objField{
		typ: types.NewObjectType(toolAuthTypeName),
		get: func(obj any) (any, bool) {
			tv, ok := obj.(*toolView)
			if !ok {
				return nil, false
			}
			tv.auth.tv = tv
			return &objVal{t: toolAuthType, v: &tv.auth}, true
		},
		set: func(obj any) bool {
			tv, ok := obj.(*toolView)
			if !ok {
				return false
			}
			_, present := tv.t.Fields["auth"]
			return present || len(tv.t.Scopes) > 0
		},
	}
	return m
}

var (
	principalType = newObjType(principalTypeName, reflect.TypeFor[*principalView](), map[string]*objField{
		"id": principalField(func(pv *principalView) any {
			if pv.id == nil {
				pv.id = types.String(pv.p.ID)
			}
			return pv.id
		}, func(p *Principal) bool { return p.ID != "" }, types.StringType),
		"tenant": principalField(func(pv *principalView) any {
			if pv.tenant == nil {
				pv.tenant = types.String(pv.p.Tenant)
			}
			return pv.tenant
		}, func(p *Principal) bool { return p.Tenant != "" }, types.StringType),
		"scopes": principalField(func(pv *principalView) any {
			if pv.scopes == nil {
				pv.scopes = types.NewStringList(types.DefaultTypeAdapter, pv.p.Scopes)
			}
			return pv.scopes
		}, func(p *Principal) bool { return len(p.Scopes) > 0 }, types.NewListType(types.StringType)),
		// A map[string]string is qualified natively by cel-go (no copy).
		"attributes": principalField(func(pv *principalView) any {
			if pv.p.Attributes == nil {
				return emptyAttributes
			}
			return pv.p.Attributes
		}, func(p *Principal) bool { return len(p.Attributes) > 0 }, types.NewMapType(types.StringType, types.StringType)),
	})
	callType = newObjType(callTypeName, reflect.TypeFor[*callView](), map[string]*objField{
		"transport":    callField(0, func(c *Call) string { return c.Transport }),
		"callId":       callField(1, func(c *Call) string { return c.CallID }),
		"runId":        callField(2, func(c *Call) string { return c.RunID }),
		"agentId":      callField(3, func(c *Call) string { return c.AgentID }),
		"parentCallId": callField(4, func(c *Call) string { return c.ParentCallID }),
	})
	toolType     = newObjType(toolTypeName, reflect.TypeFor[*toolView](), toolFields())
	toolAuthType = newObjType(toolAuthTypeName, reflect.TypeFor[*toolAuthView](), map[string]*objField{
		"scopes": {
			typ: types.NewListType(types.StringType),
			get: func(obj any) (any, bool) {
				av, ok := obj.(*toolAuthView)
				if !ok || av.tv == nil {
					return nil, false
				}
				return toolScopes(av.tv), true
			},
			set: func(obj any) bool {
				av, ok := obj.(*toolAuthView)
				return ok && av.tv != nil && len(av.tv.t.Scopes) > 0
			},
		},
	})
	emptyAttributes = map[string]string{}
)

// baseEnv is the one CEL environment every policy compiles against. A
// cel.Env is immutable and safe for concurrent use.
var baseEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Types(principalType, callType, toolType, toolAuthType),
		cel.Variable("principal", cel.ObjectType(principalTypeName)),
		cel.Variable("tool", cel.ObjectType(toolTypeName)),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("call", cel.ObjectType(callTypeName)),
		cel.Variable("now", cel.TimestampType),
		pathLib(),
		netLib(),
		cel.ParserExpressionSizeLimit(maxWhenLen),
	)
})

// listUnknown are the variables unknown at list time: a tools/list knows
// neither the arguments nor the call's transport, agent or parent. A
// variable added later that describes the call (a request's method, say)
// belongs here, in argsUnknown, in allUnknown and in inspect.
var listUnknown = []string{"args", "call"}

// argsUnknown marks the listUnknown variables unknown for list-time
// (partial) evaluation.
var argsUnknown = []*interpreter.AttributePattern{cel.AttributePattern("args"), cel.AttributePattern("call")}

// allUnknown marks every variable unknown, to find conditions whose value
// does not depend on the input at all.
var allUnknown = []*interpreter.AttributePattern{
	cel.AttributePattern("principal"), cel.AttributePattern("tool"),
	cel.AttributePattern("args"), cel.AttributePattern("call"), cel.AttributePattern("now"),
}

var emptyArgs = map[string]any{}

// activation exposes an Input to CEL without building a map per call:
// principal and call are typed objects over the Input's own structs (field
// values converted once per evaluation), args is handed over as the decoded
// map (cel-go qualifies map[string]any natively), and tool and now are
// converted on first use. An activation serves one Decide, Disclose or
// Explain and is never shared between goroutines.
type activation struct {
	in        *Input
	pview     principalView
	cview     callView
	tview     toolView
	principal objVal
	call      objVal
	tool      objVal
	now       ref.Val
}

// init points the typed objects at the activation's own views; done once
// per pooled activation.
func (a *activation) init() {
	a.principal = objVal{t: principalType, v: &a.pview}
	a.call = objVal{t: callType, v: &a.cview}
	a.tool = objVal{t: toolType, v: &a.tview}
}

// bind prepares the activation for in.
func (a *activation) bind(in *Input) {
	a.in, a.pview.p, a.cview.c = in, &in.Principal, &in.Call
	a.tview.t = &in.Tool
}

// unbind drops every reference to the bound Input and the values derived
// from it.
func (a *activation) unbind() {
	a.in, a.pview.p, a.cview.c = nil, nil, nil
	if a.pview.id != nil || a.pview.tenant != nil || a.pview.scopes != nil {
		a.pview.id, a.pview.tenant, a.pview.scopes = nil, nil, nil
	}
	for i, v := range a.cview.fields {
		if v != nil {
			a.cview.fields[i] = nil
		}
	}
	a.tview.t, a.tview.auth.tv = nil, nil
	for i, v := range a.tview.fields {
		if v != nil {
			a.tview.fields[i] = nil
		}
	}
	a.now = nil
}

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "principal":
		return &a.principal, true
	case "call":
		return &a.call, true
	case "args":
		if a.in.Args == nil {
			return emptyArgs, true
		}
		return a.in.Args, true
	case "tool":
		return &a.tool, true
	case "now":
		if a.now == nil {
			t := a.in.Now
			if t.IsZero() {
				t = time.Now()
			}
			a.now = types.Timestamp{Time: t.UTC()}
		}
		return a.now, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// partialActivation is an activation whose args and call are unknown
// (list time).
type partialActivation struct{ *activation }

// ResolveName implements interpreter.Activation; the listUnknown variables
// are never resolved.
func (a partialActivation) ResolveName(name string) (any, bool) {
	if slices.Contains(listUnknown, name) {
		return nil, false
	}
	return a.activation.ResolveName(name)
}

// UnknownAttributePatterns implements interpreter.PartialActivation.
func (a partialActivation) UnknownAttributePatterns() []*interpreter.AttributePattern {
	return argsUnknown
}

// AsPartialActivation lets cel-go find the unknown patterns (it looks for
// this method, not for the interface).
func (a partialActivation) AsPartialActivation() (interpreter.PartialActivation, bool) {
	return a, true
}

// callPartialActivation is an activation whose call alone is unknown
// (Program.DiscloseArgs: list time with known arguments).
type callPartialActivation struct{ *activation }

// callUnknown marks `call` unknown for DiscloseArgs.
var callUnknown = []*interpreter.AttributePattern{cel.AttributePattern("call")}

// ResolveName implements interpreter.Activation; call is never resolved.
func (a callPartialActivation) ResolveName(name string) (any, bool) {
	if name == "call" {
		return nil, false
	}
	return a.activation.ResolveName(name)
}

// UnknownAttributePatterns implements interpreter.PartialActivation.
func (a callPartialActivation) UnknownAttributePatterns() []*interpreter.AttributePattern {
	return callUnknown
}

// AsPartialActivation lets cel-go find the unknown patterns.
func (a callPartialActivation) AsPartialActivation() (interpreter.PartialActivation, bool) {
	return a, true
}
