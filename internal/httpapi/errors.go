package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// envelope is the OpenWOP HTTP error envelope (error-envelope.schema.json,
// CONTRACT §1.6): flat and closed, {error, message, details?}.
type envelope struct {
	Error   string         `json:"error"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// statusError is an *errcode.Error answered with an HTTP status other than
// its code's default (errcode.Code.HTTPStatus), and optionally extra
// response headers: 413 for an oversized body, 405 with Allow, 403 for an
// approval_required refusal (whose code maps to 202).
type statusError struct {
	status int
	err    *errcode.Error
	header http.Header
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// withStatus returns err answered with status instead of its code's
// default.
func withStatus(status int, err *errcode.Error) error {
	return &statusError{status: status, err: err}
}

// notFoundTool is the one answer for a tool the caller may not see and for
// a tool that does not exist (CONTRACT §4: indistinguishable from unknown).
// Every endpoint builds it here, from the name the caller sent, so the two
// cases cannot drift apart.
func notFoundTool(name string) error {
	return errcode.Errorf(errcode.NotFound, "unknown tool %q", clip(name))
}

// maxEcho bounds, in bytes, a caller-supplied value (tool name, run id,
// query parameter, member name, path) echoed in an error message: a longer
// one is cut there (at a UTF-8 boundary) and ends with "…".
const maxEcho = 200

// maxMessage bounds an error message as written (writeError): a safety net
// behind clip, for a message that echoes a value some other package did
// not clip.
const maxMessage = 2048

// clip returns s cut to at most max bytes (maxEcho when max is omitted) at
// a rune boundary, with "…" appended when it was cut.
func clip(s string, max ...int) string {
	n := maxEcho
	if len(max) > 0 {
		n = max[0]
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// scrubEchoes returns msg with each value of vals longer than maxEcho that
// it echoes (as is, or quoted as %q writes it) replaced by the clipped
// value: for messages built by other packages from a caller's input.
func scrubEchoes(msg string, vals ...string) string {
	for _, v := range vals {
		if len(v) <= maxEcho {
			continue
		}
		q, cq := strconv.Quote(v), strconv.Quote(clip(v))
		msg = strings.ReplaceAll(msg, q, cq)                          // "…" as %q writes it
		msg = strings.ReplaceAll(msg, q[1:len(q)-1], cq[1:len(cq)-1]) // the same, unquoted
		msg = strings.ReplaceAll(msg, v, clip(v))
	}
	return msg
}

// scrubError returns e with scrubEchoes applied to its message (a copy; e
// may be shared). A nil e is returned as is.
func scrubError(e *errcode.Error, vals ...string) *errcode.Error {
	if e == nil {
		return nil
	}
	msg := scrubEchoes(e.Message, vals...)
	if msg == e.Message {
		return e
	}
	cp := *e
	cp.Message = msg
	return &cp
}

// invalid is an invalid_argument error naming the offending request field.
func invalid(field, format string, args ...any) *errcode.Error {
	return errcode.Errorf(errcode.InvalidArgument, format, args...).WithDetails(map[string]any{"field": field})
}

// writeError is the HTTP surface's one error mapper (DESIGN.md decision 8,
// STYLE rule 23): every non-2xx answer of every endpoint is written here as
// the flat envelope {error, message, details?} with Content-Type
// application/json.
//
//   - The status is the statusError's, else the code's HTTPStatus; a code
//     whose default is not an error status (tool_execution_failed → 200,
//     approval_required → 202) is never written through here with that
//     status: it becomes 500 (a handler bug, logged).
//   - unauthenticated (401) is delegated to the Authenticator's Challenge,
//     which writes the same flat envelope plus WWW-Authenticate (RFC 6750).
//   - rate_limited (429) carries Retry-After: details.retryAfterSeconds,
//     at least 1.
//   - An error that is not an *errcode.Error is answered 500 internal_error
//     with a generic message; its text is logged, never sent.
//
// Safe for concurrent use; must be called before anything else is written
// to w.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := 0
	var extra http.Header
	var se *statusError
	if errors.As(err, &se) {
		status, extra = se.status, se.header
	}
	e := errcode.As(err)
	if e == nil {
		h.log.Error("http api: unexpected error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = errcode.New(errcode.Internal, "internal error")
	}
	if e.Code == errcode.Unauthenticated && status == 0 && h.auth != nil {
		h.auth.Challenge(w, r, e)
		return
	}
	if e.Code == errcode.AuditUnavailable && e.Unwrap() != nil {
		// A store's driver error names the database (host, port, user,
		// name): the operator's log gets it, the caller a plain answer.
		h.log.Error("http api: the store is unavailable", "method", r.Method, "path", r.URL.Path, "err", e.Message)
		e = errcode.New(errcode.AuditUnavailable, "the audit store is unavailable; try again later")
	}
	if status == 0 {
		status = e.Code.HTTPStatus()
	}
	if status < 400 {
		h.log.Error("http api: error code without an error status", "code", e.Code, "path", r.URL.Path)
		e, status = errcode.Errorf(errcode.Internal, "internal error (%s)", e.Code), http.StatusInternalServerError
	}
	body := envelope{Error: string(e.Code), Message: clip(e.Message, maxMessage), Details: e.Details}
	if body.Message == "" {
		body.Message = http.StatusText(status)
	}
	if body.Message == "" {
		body.Message = body.Error
	}
	raw, merr := json.Marshal(body)
	if merr != nil { // details that do not marshal: drop them, keep the answer
		body.Details = nil
		raw, _ = json.Marshal(body)
	}
	hdr := w.Header()
	for k, vs := range extra {
		hdr[k] = vs
	}
	if e.Code == errcode.RateLimited {
		hdr.Set("Retry-After", strconv.Itoa(retryAfter(e.Details)))
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(raw, '\n'))
}

// retryAfter returns details.retryAfterSeconds (ratelimit.Result.Details)
// as whole seconds, at least 1.
func retryAfter(details map[string]any) int {
	n := 0
	switch v := details["retryAfterSeconds"].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	case float64:
		n = int(v)
	}
	return max(n, 1)
}

// writeJSON writes a 2xx JSON answer. A value that does not marshal is a
// handler bug and is answered through writeError as internal_error.
func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		h.writeError(w, r, fmt.Errorf("encoding the response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(raw, '\n'))
}
