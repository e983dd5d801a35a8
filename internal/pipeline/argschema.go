package pipeline

// argschema.go validates a call's arguments against the inputSchema the
// catalog advertises for its tool (issue 13 point 6), JSON Schema 2020-12
// with github.com/santhosh-tekuri/jsonschema/v6. Schemas are compiled once
// per catalog snapshot (State.prepare); a call only runs Validate.

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
)

// maxSchemaErrors bounds the violations listed in details.errors.
const maxSchemaErrors = 10

// argSchema is the compiled inputSchema of one tool: schema is nil when the
// tool has none, skips validation (validate_args: false) or its schema does
// not compile (then bad holds the reason and every call is refused).
type argSchema struct {
	schema *jsonschema.Schema
	bad    string
}

// noLoader refuses every external reference: an inputSchema is compiled
// from itself and the built-in meta-schemas only, never from a file or the
// network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not loaded (%s)", url)
}

// compileArgSchemas compiles the inputSchema of every tool of snap that
// validates its arguments, by toolId.
func compileArgSchemas(snap *catalog.Snapshot) map[string]argSchema {
	out := map[string]argSchema{}
	for _, t := range snap.Tools() {
		d := &t.Descriptor
		if d.SkipArgsValidation || len(bytes.TrimSpace(d.InputSchema)) == 0 {
			continue
		}
		out[d.ToolID] = compileArgSchema(d.InputSchema)
	}
	return out
}

func compileArgSchema(raw []byte) argSchema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return argSchema{bad: err.Error()}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = "toolgate:///inputSchema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return argSchema{bad: err.Error()}
	}
	s, err := c.Compile(loc)
	if err != nil {
		return argSchema{bad: err.Error()}
	}
	return argSchema{schema: s}
}

// validateArgs checks args (a JSON object) against the tool's compiled
// inputSchema. It returns nil when they conform or the tool is not
// validated, else an *errcode.Error: invalid_argument naming the first
// offending path (message, details.path, details.errors: up to
// maxSchemaErrors {path, message}), or invalid_config when the tool's
// schema does not compile. Messages are redacted.
func (p *Pipeline) validateArgs(st *State, toolID string, args []byte) *errcode.Error {
	as, ok := st.schemas[toolID]
	if !ok {
		return nil
	}
	if as.bad != "" {
		return errcode.Errorf(errcode.InvalidConfig, "%s: its inputSchema is not a valid JSON Schema, so its arguments cannot be checked (set tools[].validate_args: false to call it unchecked): %s",
			toolID, p.opts.Redactor.RedactString(as.bad)).WithDetails(map[string]any{"toolName": toolID})
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return errcode.Errorf(errcode.InvalidArgument, "arguments must be a JSON object: %v", err)
	}
	err = as.schema.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return errcode.Errorf(errcode.InvalidArgument, "arguments do not match the inputSchema of %s: %s", toolID, p.opts.Redactor.RedactString(err.Error())).
			WithDetails(map[string]any{"toolName": toolID})
	}
	var list []any
	var firstPath, firstMsg string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		path := pointer(e.InstanceLocation)
		if r, ok := e.ErrorKind.(*kind.Required); ok && len(r.Missing) > 0 {
			path = pointer(append(append([]string(nil), e.InstanceLocation...), r.Missing[0]))
		}
		msg := p.opts.Redactor.RedactString(kindMessage(e.ErrorKind))
		if firstPath == "" {
			firstPath, firstMsg = path, msg
		}
		if len(list) < maxSchemaErrors {
			list = append(list, map[string]any{"path": path, "message": msg})
		}
	}
	walk(ve)
	if firstPath == "" {
		firstPath, firstMsg = "/", p.opts.Redactor.RedactString(ve.Error())
		list = append(list, map[string]any{"path": firstPath, "message": firstMsg})
	}
	return errcode.Errorf(errcode.InvalidArgument, "arguments do not match the inputSchema of %s: at %s: %s", toolID, firstPath, firstMsg).
		WithDetails(map[string]any{"toolName": toolID, "path": firstPath, "errors": list})
}

// pointer is the JSON Pointer (RFC 6901) of an instance location, "/" for
// the arguments object itself.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// kindMessage is the library's English message for one violation (its
// printer is only reachable through an output unit).
func kindMessage(k jsonschema.ErrorKind) string {
	out := (&jsonschema.ValidationError{ErrorKind: k}).BasicOutput()
	if out.Error != nil {
		return out.Error.String()
	}
	return "does not match the schema"
}
