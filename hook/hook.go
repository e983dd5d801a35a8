// Package hook defines toolgate's lifecycle hooks: Go callbacks that run
// before a tool call, after it succeeds, or after it fails.
//
// A hook is registered in one of two modes:
//
//   - Observe: the hook sees the call but cannot change its course. Its
//     verdicts and errors are ignored (and logged); it never denies.
//   - Enforce: the hook may deny the call. It may replace the call's
//     arguments only if it is registered with Mutating set; the gate then
//     runs the policy decision again on the new arguments and records the
//     hook's name as the receipt's mutationSource. An enforce hook that
//     returns an error, panics or exceeds its Timeout denies the call
//     (fail closed, DESIGN.md decision 1).
//
// Hooks run in registration order; the call waits for each one, up to the
// hook's Timeout (each callback runs on its own goroutine so that a hook
// that ignores its context cannot hold the call past the timeout; such a
// goroutine is abandoned). Hooks receive copies of the arguments and of the
// result, so they cannot change either in place. A hook must be safe for
// concurrent use by many calls at once.
package hook

import (
	"context"
	"encoding/json"
	"time"
)

// Mode is how a hook's outcome is applied: Observe or Enforce.
type Mode string

// The two hook modes.
const (
	Observe Mode = "observe"
	Enforce Mode = "enforce"
)

// Call is what a hook sees of a call. Args are the arguments as they will be
// executed (after any earlier mutation); they are NOT redacted, because
// in-process hooks are trusted code. Hooks must not retain Args after return.
type Call struct {
	CallID       string
	RunID        string
	AgentID      string
	ParentCallID string
	ToolID       string // canonical toolId, e.g. "mcp:fs.read_file"
	Transport    string // "mcp", "http" or "native"
	Principal    string
	Tenant       string
	Args         json.RawMessage
	ArgsHash     string // argsHash of Args (redacted, RFC 8785, SHA-256 hex)
	// RedactArgs, when set, is the call's own redaction of Args: the
	// gateway's rules plus the values the key-name rule removed from these
	// arguments (a value copied into another argument is scrubbed too). A
	// hook that sends arguments anywhere uses it instead of a redactor of
	// its own. Returns the RFC 8785 form; errors as audit.Redactor.RedactJSON.
	RedactArgs func(args []byte) ([]byte, error)
}

// Verdict is a before-hook's answer. The zero Verdict lets the call proceed
// unchanged. Deny refuses it with Reason. Args, when non-nil, replaces the
// call's arguments; only a Mutating enforce hook may set it (any other hook
// that sets it denies the call, since it tried to do something it did not
// declare).
type Verdict struct {
	Deny   bool
	Reason string
	Args   json.RawMessage
}

// Outcome is what after- and error-hooks see of a finished call.
type Outcome struct {
	Status     string          // "ok" or "error"
	Output     json.RawMessage // the tool's result on "ok"; nil on "error"
	ErrorCode  string          // errcode code on "error"
	Error      error           // the failure on "error"
	DurationMs int64           // how long the tool ran, in ms
}

// Hook is a lifecycle hook. Before runs after the policy decision and the
// rate limit admitted the call, and before the tool is invoked. After runs
// when the tool returned successfully; OnError when it failed. An enforce
// hook's After error (or panic, or timeout) withholds the result: the caller
// gets status error with code result_withheld, and the call is recorded so.
// OnError errors are logged only (the call already failed). Implementations
// must be safe for concurrent use.
type Hook interface {
	Before(ctx context.Context, c *Call) (Verdict, error)
	After(ctx context.Context, c *Call, o *Outcome) error
	OnError(ctx context.Context, c *Call, o *Outcome) error
}

// Registration binds a Hook to a name, a mode, and limits. Timeout bounds
// each callback of an enforce hook (default 2 s); observe hooks are bounded
// by the same timeout but a timeout only abandons their result.
type Registration struct {
	Name     string // stable name, recorded as "hook:<Name>" in mutationSource
	Hook     Hook
	Mode     Mode
	Mutating bool          // the hook may replace arguments (Enforce only)
	Timeout  time.Duration // per callback; 0 means 2 s
}

// Funcs adapts plain functions to Hook; nil fields are no-ops.
type Funcs struct {
	BeforeFunc  func(ctx context.Context, c *Call) (Verdict, error)
	AfterFunc   func(ctx context.Context, c *Call, o *Outcome) error
	OnErrorFunc func(ctx context.Context, c *Call, o *Outcome) error
}

// Before calls BeforeFunc, if set.
func (f Funcs) Before(ctx context.Context, c *Call) (Verdict, error) {
	if f.BeforeFunc == nil {
		return Verdict{}, nil
	}
	return f.BeforeFunc(ctx, c)
}

// After calls AfterFunc, if set.
func (f Funcs) After(ctx context.Context, c *Call, o *Outcome) error {
	if f.AfterFunc == nil {
		return nil
	}
	return f.AfterFunc(ctx, c, o)
}

// OnError calls OnErrorFunc, if set.
func (f Funcs) OnError(ctx context.Context, c *Call, o *Outcome) error {
	if f.OnErrorFunc == nil {
		return nil
	}
	return f.OnErrorFunc(ctx, c, o)
}
