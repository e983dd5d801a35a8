// Package webhook is a hook.Hook that POSTs each call to a URL (config
// `hooks:`), so that the systems a security team already runs (a SIEM, a
// DLP service, a change-approval bot) see or decide tool calls.
//
// # Request
//
// Each callback POSTs one JSON object (Content-Type application/json):
//
//	{"phase": "before" | "after" | "error", "hook": name,
//	 "callId", "runId", "agentId", "parentCallId"?, "toolId", "transport",
//	 "principal", "tenant"?, "argsHash",
//	 "args"?: {...},                    // only with Content "full": the redacted arguments
//	 "outcome"?: {"status", "errorCode"?, "durationMs"}}   // after and error
//
// It is content-free by default: identifiers and the argsHash, never the
// arguments or the result.
//
// # Signature
//
// Every request carries
//
//	Toolgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// A receiver recomputes the HMAC over the timestamp, a dot and the raw
// body, compares in constant time, and rejects timestamps too far from its
// clock (replay protection). Verify does exactly that.
//
// # Modes
//
// Enforce (synchronous): the before callback's response decides, and only a
// 2xx response whose body is one JSON object may allow (ParseVerdict): {}
// (or an object with "deny": false) allows; {"deny": true, "reason": "…"}
// denies; {"args": {...}} replaces the arguments when the hook is declared
// mutating (the pipeline then decides again and records mutationSource
// "hook:<name>"). Any other status, an empty body, null or any other JSON
// value, text that is not JSON, a member of the wrong type or a repeated
// member, an unreadable body or a timeout is an error, which the pipeline
// turns into a denial (fail closed). Observe
// (fire and forget): each callback only enqueues the request on a bounded
// queue that one worker drains; when the queue is full the request is
// dropped and counted (Dropped), so an observe hook never slows a call by
// more than its queue insert.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/tracing"
)

// SignatureHeader is the request header carrying the HMAC signature.
const SignatureHeader = "Toolgate-Signature"

// DefaultQueue is the observe queue length when Options.Queue is 0.
const DefaultQueue = 1024

// maxResponse bounds an enforce response body (bytes).
const maxResponse = 1 << 20

// Options configures New.
type Options struct {
	Name   string    // the hook's name (sent as "hook")
	URL    string    // http(s) endpoint; required
	Secret []byte    // HMAC-SHA256 key; required
	Mode   hook.Mode // hook.Observe or hook.Enforce
	// Full sends the redacted arguments ("args"); Redact must then be set.
	Full   bool
	Redact func([]byte) ([]byte, error)
	// Client sends the requests; nil: a client without its own timeout
	// (the pipeline's per-callback timeout applies). Redirects are never
	// followed, whatever its CheckRedirect. toolgate serve passes an
	// SSRF-guarded one (internal/egress) for a hook with an egress block;
	// a request it refuses fails with an error whose chain holds the
	// *egress.DeniedError.
	Client *http.Client
	Queue  int // observe queue length; 0 means DefaultQueue
	Logger *slog.Logger
	Now    func() time.Time
}

// Hook is the webhook hook. Safe for concurrent use; Close stops the
// observe worker.
type Hook struct {
	opts    Options
	queue   chan queued
	dropped atomic.Int64
	sent    atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// New returns a webhook hook. Errors (plain): a missing URL or secret, an
// unknown mode, Full without Redact.
func New(opts Options) (*Hook, error) {
	if opts.URL == "" || !(strings.HasPrefix(opts.URL, "http://") || strings.HasPrefix(opts.URL, "https://")) {
		return nil, fmt.Errorf("webhook %s: url %q is not an http(s) URL", opts.Name, opts.URL)
	}
	if len(opts.Secret) == 0 {
		return nil, fmt.Errorf("webhook %s: a signing secret is required", opts.Name)
	}
	if opts.Mode != hook.Observe && opts.Mode != hook.Enforce {
		return nil, fmt.Errorf("webhook %s: mode %q is not observe or enforce", opts.Name, opts.Mode)
	}
	if opts.Full && opts.Redact == nil {
		return nil, fmt.Errorf("webhook %s: content full needs a redactor", opts.Name)
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	// A redirect would send the signed body elsewhere: never follow one
	// (a 3xx is then a non-2xx answer, an error).
	c := *opts.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	opts.Client = &c
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Hook{opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	if opts.Mode == hook.Observe {
		h.queue = make(chan queued, opts.Queue)
		go h.worker()
	} else {
		close(h.done)
	}
	return h, nil
}

// Name is the hook's name.
func (h *Hook) Name() string { return h.opts.Name }

// Dropped is the number of observe requests dropped because the queue was
// full (the metric toolgate_hook_dropped_total).
func (h *Hook) Dropped() int64 { return h.dropped.Load() }

// Sent is the number of requests delivered with a 2xx answer.
func (h *Hook) Sent() int64 { return h.sent.Load() }

// Close stops the observe worker after the request it is sending; queued
// requests are dropped. Idempotent.
func (h *Hook) Close() {
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// request is the JSON body.
type request struct {
	Phase        string          `json:"phase"`
	Hook         string          `json:"hook"`
	CallID       string          `json:"callId"`
	RunID        string          `json:"runId"`
	AgentID      string          `json:"agentId"`
	ParentCallID string          `json:"parentCallId,omitempty"`
	ToolID       string          `json:"toolId"`
	Transport    string          `json:"transport"`
	Principal    string          `json:"principal"`
	Tenant       string          `json:"tenant,omitempty"`
	ArgsHash     string          `json:"argsHash"`
	Args         json.RawMessage `json:"args,omitempty"`
	Outcome      *outcome        `json:"outcome,omitempty"`
}

type outcome struct {
	Status     string `json:"status"`
	ErrorCode  string `json:"errorCode,omitempty"`
	DurationMs int64  `json:"durationMs"`
}

func (h *Hook) body(phase string, c *hook.Call, o *hook.Outcome) ([]byte, error) {
	r := request{Phase: phase, Hook: h.opts.Name, CallID: c.CallID, RunID: c.RunID, AgentID: c.AgentID, ParentCallID: c.ParentCallID,
		ToolID: c.ToolID, Transport: c.Transport, Principal: c.Principal, Tenant: c.Tenant, ArgsHash: c.ArgsHash}
	if h.opts.Full {
		redact := h.opts.Redact
		if c.RedactArgs != nil {
			redact = c.RedactArgs // the call's own: its removed values too
		}
		red, err := redact(c.Args)
		if err != nil {
			return nil, err
		}
		r.Args = red
	}
	if o != nil {
		r.Outcome = &outcome{Status: o.Status, ErrorCode: o.ErrorCode, DurationMs: o.DurationMs}
	}
	return json.Marshal(r)
}

// Before implements hook.Hook.
func (h *Hook) Before(ctx context.Context, c *hook.Call) (hook.Verdict, error) {
	body, err := h.body("before", c, nil)
	if err != nil {
		return hook.Verdict{}, err
	}
	if h.opts.Mode == hook.Observe {
		h.enqueue(ctx, body)
		return hook.Verdict{}, nil
	}
	raw, err := h.post(ctx, body)
	if err != nil {
		return hook.Verdict{}, err
	}
	v, err := ParseVerdict(raw)
	if err != nil {
		return hook.Verdict{}, fmt.Errorf("webhook %s: %v", h.opts.Name, err)
	}
	return v, nil
}

// ParseVerdict decodes an enforce hook's answer body: exactly one JSON
// object (surrounding whitespace allowed) whose optional members are
// "deny" (a boolean), "reason" (a string) and "args" (the replacement
// arguments, any JSON value; null means none); other members are ignored.
// An empty body, null, any JSON value other than an object, invalid JSON,
// trailing data, a member of the wrong type or a member given twice is an
// error (the pipeline then denies the call: only an object may allow).
// Safe for concurrent use.
func ParseVerdict(raw []byte) (hook.Verdict, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return hook.Verdict{}, errors.New("the response body is empty, not a JSON object")
	}
	if t[0] != '{' {
		return hook.Verdict{}, fmt.Errorf("the response is not a JSON object (it starts with %q)", clipBytes(t, 16))
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if _, err := dec.Token(); err != nil {
		return hook.Verdict{}, fmt.Errorf("the response is not a JSON object: %v", err)
	}
	var v hook.Verdict
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return hook.Verdict{}, fmt.Errorf("the response is not a JSON object: %v", err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return hook.Verdict{}, fmt.Errorf("the response is not a JSON object: %v", err)
		}
		switch key {
		case "deny", "reason", "args":
		default:
			continue
		}
		if seen[key] {
			return hook.Verdict{}, fmt.Errorf("the response gives %q more than once", key)
		}
		seen[key] = true
		switch key {
		case "deny":
			if err := json.Unmarshal(val, &v.Deny); err != nil || string(val) == "null" {
				return hook.Verdict{}, errors.New(`the response's "deny" is not a boolean`)
			}
		case "reason":
			if err := json.Unmarshal(val, &v.Reason); err != nil || string(val) == "null" {
				return hook.Verdict{}, errors.New(`the response's "reason" is not a string`)
			}
		case "args":
			if string(val) != "null" {
				v.Args = val
			}
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return hook.Verdict{}, fmt.Errorf("the response is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return hook.Verdict{}, errors.New("the response has data after its JSON object")
	}
	return v, nil
}

// clipBytes is b cut to at most n bytes, for a message.
func clipBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// After implements hook.Hook.
func (h *Hook) After(ctx context.Context, c *hook.Call, o *hook.Outcome) error {
	return h.notify(ctx, "after", c, o)
}

// OnError implements hook.Hook.
func (h *Hook) OnError(ctx context.Context, c *hook.Call, o *hook.Outcome) error {
	return h.notify(ctx, "error", c, o)
}

func (h *Hook) notify(ctx context.Context, phase string, c *hook.Call, o *hook.Outcome) error {
	body, err := h.body(phase, c, o)
	if err != nil {
		return err
	}
	if h.opts.Mode == hook.Observe {
		h.enqueue(ctx, body)
		return nil
	}
	_, err = h.post(ctx, body)
	return err
}

// queued is an observe request: its body and the span context of the
// callback that queued it (the hook span, when tracing is on), so that
// the request carries its traceparent and a failure's log line the
// trace_id and span_id of the call, although it is sent after the call
// may have ended.
type queued struct {
	span trace.SpanContext
	body []byte
}

func (h *Hook) enqueue(ctx context.Context, body []byte) {
	select {
	case h.queue <- queued{span: trace.SpanContextFromContext(ctx), body: body}:
	default:
		h.dropped.Add(1)
	}
}

func (h *Hook) worker() {
	defer close(h.done)
	for {
		select {
		case <-h.stop:
			return
		case q := <-h.queue:
			// Not the callback's context (the call may be over and it
			// cancelled): a fresh one carrying only its span context.
			ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), q.span), 10*time.Second)
			go func() {
				select {
				case <-h.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			if _, err := h.post(ctx, q.body); err != nil {
				h.opts.Logger.WarnContext(ctx, "observe webhook failed", "hook", h.opts.Name, "err", err)
			}
			cancel()
		}
	}
}

// post sends body signed and returns the 2xx response body.
func (h *Hook) post(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.opts.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(h.opts.Secret, h.opts.Now(), body))
	tracing.Inject(ctx, req.Header) // the hook span's W3C Trace Context, if any
	resp, err := h.opts.Client.Do(req)
	if err != nil {
		// The detail (it names the hook's address) goes to the operator's
		// log, not into the call's error, which the agent sees.
		h.opts.Logger.WarnContext(ctx, "webhook request failed", "hook", h.opts.Name, "err", err)
		var denied *egress.DeniedError
		if errors.As(err, &denied) {
			// The SSRF guard (Client from egress.NewClient) refused the
			// hook's address: the chain keeps it (rule and host) for the
			// pipeline's egress_denied; nothing was sent.
			return nil, fmt.Errorf("webhook %s: %w", h.opts.Name, denied)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("webhook %s: no answer in time", h.opts.Name)
		}
		return nil, fmt.Errorf("webhook %s: the request failed", h.opts.Name)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("webhook %s: reading the response: %w", h.opts.Name, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("webhook %s: HTTP %d", h.opts.Name, resp.StatusCode)
	}
	if len(raw) > maxResponse {
		return nil, fmt.Errorf("webhook %s: the response exceeds %d bytes", h.opts.Name, maxResponse)
	}
	h.sent.Add(1)
	return raw, nil
}

// Sign returns the SignatureHeader value for body at time t:
// "t=<unix>,v1=<hex HMAC-SHA256(secret, "<unix>.<body>")>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a SignatureHeader value for body against secret, with a
// timestamp at most tolerance away from now. For receivers (and tests).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("webhook signature: malformed header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook signature: timestamp outside the tolerance")
	}
	want := Sign(secret, time.Unix(sec, 0), body)
	_, wantSig, _ := strings.Cut(want, ",v1=")
	got, err := hex.DecodeString(sig)
	exp, _ := hex.DecodeString(wantSig)
	if err != nil || !hmac.Equal(got, exp) {
		return errors.New("webhook signature: mismatch")
	}
	return nil
}
