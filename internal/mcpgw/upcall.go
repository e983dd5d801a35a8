package mcpgw

// upcall.go is a lean client for the one request the gateway sends most:
// tools/call to a Streamable HTTP upstream. It reuses the upstream session
// that the go-sdk client initialized (its Mcp-Session-Id and negotiated
// protocol version) and speaks the wire protocol directly: one POST per call,
// the response read on the calling goroutine, no jsonrpc2 connection, no
// reader goroutine, no per-message channel hand-off. Everything else on the
// session (initialize, lists, notifications outside calls, the standalone GET
// stream, resources, prompts) stays on the go-sdk client.
//
// Protocol: MCP Streamable HTTP transport, 2025-11-25 (§ "Sending Messages to
// the Server", "Resumability and Redelivery", "Session Management").

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/canonjson"
)

const (
	// upDefaultMaxBody bounds the bytes read from the upstream for one call
	// (all SSE events, including notifications and resumed streams, count).
	upDefaultMaxBody = 64 << 20

	// upIDPrefix prefixes the JSON-RPC ids of upCaller requests. The go-sdk
	// client on the same session uses integer ids, and the server keys its
	// in-flight table by (type, value), so "tg-<n>" strings never collide.
	upIDPrefix = "tg-"

	// upNotifyTimeout bounds the best-effort notifications/cancelled POST.
	upNotifyTimeout = 5 * time.Second

	// upDrainTimeout and upDrainMax bound how long and how much we read after
	// our response arrived on an SSE stream, so an HTTP/1.1 connection can go
	// back to the idle pool. A server ends the stream right after the
	// response (its last chunk comes with it or a moment later); one that
	// keeps the stream open costs each call upDrainTimeout of latency and
	// the connection, never the result.
	upDrainTimeout = 20 * time.Millisecond
	upDrainMax     = 256 << 10

	// upMaxResumes is the number of consecutive stream resumptions (GET with
	// Last-Event-ID) allowed without receiving a new event.
	upMaxResumes = 3

	// upDefaultRetry is the resumption delay when the server sent no retry
	// field; it doubles per attempt without progress.
	upDefaultRetry = 500 * time.Millisecond

	// upReadBufSize is the bufio buffer for SSE parsing; longer lines are
	// assembled in a side buffer.
	upReadBufSize = 16 << 10

	// upPoolMaxBuf: buffers grown past this are dropped rather than pooled.
	upPoolMaxBuf = 1 << 20
)

var (
	// errUpBodyTooLarge is wrapped by callTool's error when the upstream
	// response exceeds the caller's maxBody.
	errUpBodyTooLarge = errors.New("upstream response exceeds size limit")

	// errUpStreamEnded is wrapped (inside an *upError) when the upstream
	// closed the response without a JSON-RPC response to our request.
	errUpStreamEnded = errors.New("upstream stream ended without a response to tools/call")

	// errUpResumeFailed is wrapped (with errUpStreamEnded) when the
	// upstream closed a resumable stream (it had sent event ids) and
	// resuming it with Last-Event-ID did not bring our response: the
	// upstream ended the stream on purpose (SEP-1699) but cannot resume it.
	errUpResumeFailed = errors.New("resuming the stream failed")
	// errUpStreamBroken wraps a read error of an SSE response (the
	// connection broke mid-stream); run resumes after it as after a clean
	// end when the server gave event ids, as the SDK client does.
	errUpStreamBroken = errors.New("the SSE stream broke")

	// errUpBadArgs is returned when args is not a single JSON object or null.
	errUpBadArgs = errors.New("tools/call arguments must be a JSON object")
)

// Header values shared by all requests. Each slice has len == cap so an
// append by a RoundTripper can never write into the shared array (and
// RoundTrippers must not mutate requests anyway).
var (
	upHdrJSON      = []string{"application/json"}
	upHdrAccept    = []string{"application/json, text/event-stream"}
	upHdrAcceptSSE = []string{"text/event-stream"}
)

// upSession identifies an initialized Streamable HTTP session on the
// upstream. Both values come from the go-sdk client session; see
// upSessionOf. An empty ID is allowed (stateless upstream): then no
// Mcp-Session-Id header is sent and the server cannot make requests to us.
type upSession struct {
	ID              string // Mcp-Session-Id
	ProtocolVersion string // Mcp-Protocol-Version, the negotiated version
}

// upSessionOf returns the upSession of a connected go-sdk client session.
func upSessionOf(cs *mcp.ClientSession) upSession {
	s := upSession{ID: cs.ID()}
	if ir := cs.InitializeResult(); ir != nil {
		s.ProtocolVersion = ir.ProtocolVersion
	}
	return s
}

// upHandlers receives what the upstream sends on a call's SSE stream before
// the response. Both callbacks run synchronously on the calling goroutine, in
// stream order, and the stream is not read while they run (a slow callback
// back-pressures the upstream; that is intended for elicitation/sampling).
// The params slices are private copies the callbacks may retain.
//
// Note: in JSON-response mode (upstream StreamableHTTPOptions.JSONResponse)
// the go-sdk server routes call-related notifications and requests to the
// standalone GET stream instead, i.e. to the go-sdk client's handlers; these
// callbacks then only see what arrives on the POST response (nothing).
type upHandlers struct {
	// OnNotification receives every notification (notifications/message,
	// notifications/progress, anything else). Nil drops them.
	OnNotification func(ctx context.Context, method string, params json.RawMessage)

	// OnRequest answers a server→client request (ping, roots/list,
	// sampling/createMessage, elicitation/create, ...). The result is
	// marshalled with encoding/json (nil means {}); a non-nil error is sent
	// as the JSON-RPC error instead. Nil uses upDefaultRequest. The answer is
	// POSTed to the upstream with the session headers before reading on.
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (result any, err *jsonrpc.Error)
}

// upDefaultRequest is the answer to server→client requests when
// upHandlers.OnRequest is nil: ping → {}, roots/list → {"roots":[]}, anything
// else → -32601 method not found. OnRequest implementations may delegate to
// it for methods they do not handle.
func upDefaultRequest(method string) (any, *jsonrpc.Error) {
	switch method {
	case "ping":
		return json.RawMessage(`{}`), nil
	case "roots/list":
		return json.RawMessage(`{"roots":[]}`), nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + method}
}

// upError reports that no usable response came from the upstream: the HTTP
// request failed (Status 0, Err set), the upstream answered with a non-2xx
// status (Status, Body; 404 means the session is gone, §"Session
// Management"), or the 2xx response was unusable (wrong content type, stream
// ended without our response, malformed JSON-RPC; Err set). The gateway maps
// it to upstream_unavailable, or, when Delivered, to upstream_protocol_error
// (Protocol) or upstream_crashed. If a non-2xx body was a JSON-RPC error
// response, RPC holds it (informational; Unwrap does not expose it).
type upError struct {
	Status int            // HTTP status; 0 if no response was received
	Body   string         // up to 1 KiB of a non-2xx response body
	RPC    *jsonrpc.Error // JSON-RPC error carried by a non-2xx body, if any
	Err    error          // underlying cause, if any
	// Delivered: the upstream accepted the request (a 2xx response), so the
	// tool may have run although no valid answer came.
	Delivered bool
	// Protocol: what the upstream sent is not a valid response to the
	// request (not JSON-RPC, a response with another id only, a result that
	// is not a CallToolResult, an unexpected content type), as opposed to
	// a stream that ended or broke before the answer.
	Protocol bool
}

// Error implements error.
func (e *upError) Error() string {
	var b strings.Builder
	b.WriteString("upstream")
	if e.Status != 0 {
		b.WriteString(" HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.RPC != nil {
		b.WriteString(": ")
		b.WriteString(e.RPC.Error())
	} else if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *upError) Unwrap() error { return e.Err }

// SessionGone reports whether the upstream no longer knows the session
// (HTTP 404 on a request carrying Mcp-Session-Id); the session must be
// re-initialized by the go-sdk client.
func (e *upError) SessionGone() bool { return e.Status == http.StatusNotFound }

// upCaller posts tools/call requests on existing Streamable HTTP sessions of
// one upstream endpoint and reads the result on the calling goroutine.
//
// It is safe for concurrent use by any number of calls, on one or several
// sessions: its fields are immutable after newUpCaller, request ids come from
// a process-wide atomic counter, and all per-call state lives on the stack or
// in pooled buffers.
type upCaller struct {
	client  *http.Client // upstream client; its Transport adds configured headers
	url     *url.URL     // endpoint, parsed once, shared read-only by requests
	maxBody int64        // bound on bytes read per call
}

// upSeq numbers upCaller requests process-wide, so ids stay unique on a
// session even if several upCallers share it (the go-sdk server rejects a
// duplicate in-flight id with HTTP 400).
var upSeq atomic.Uint64

// newUpCaller returns an upCaller for the Streamable HTTP endpoint. client is
// the same *http.Client the go-sdk transport uses (nil: http.DefaultClient).
// maxBody bounds the bytes read per call; <= 0 means upDefaultMaxBody.
func newUpCaller(client *http.Client, endpoint string, maxBody int64) (*upCaller, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("upstream endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream endpoint %q: not http(s)", endpoint)
	}
	if client == nil {
		client = http.DefaultClient
	}
	if maxBody <= 0 {
		maxBody = upDefaultMaxBody
	}
	return &upCaller{client: client, url: u, maxBody: maxBody}, nil
}

// callTool calls tool name on session s with args (a JSON object, or empty
// for {}) and meta (params._meta, e.g. {"progressToken": ...}; nil omits it).
// Notifications and server→client requests that arrive on the call's stream
// go to h before the result is returned.
//
// It returns the decoded result and the raw JSON of the JSON-RPC "result"
// member (a private copy). Errors:
//   - ctx.Err() if ctx ended; if the request may have reached the upstream,
//     notifications/cancelled is POSTed in the background (best effort).
//   - *jsonrpc.Error if the upstream answered with a JSON-RPC error.
//   - *upError if there was no usable response (see upError).
//   - an error wrapping errUpBodyTooLarge if the response exceeded maxBody.
//   - errUpBadArgs if args is not a JSON object (nothing is sent).
//
// A result that does not decode as CallToolResult yields an *upError and the
// raw bytes. An *upError after the upstream accepted the request (2xx) has
// Delivered set.
func (c *upCaller) callTool(ctx context.Context, s upSession, name string, args json.RawMessage, meta map[string]any, h upHandlers) (*mcp.CallToolResult, json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	args = bytes.TrimSpace(args)
	if len(args) > 0 && !(args[0] == '{' && json.Valid(args)) && string(args) != "null" {
		return nil, nil, errUpBadArgs
	}

	st := upCall{c: c, s: s, h: h, budget: c.maxBody}
	st.seq = upSeq.Add(1)
	st.idq = strconv.AppendUint(append(st.idbuf[:0], `"`+upIDPrefix...), st.seq, 10)
	st.idq = append(st.idq, '"')

	rb := upGetReqBody()
	buf := &rb.buf
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(st.idq)
	buf.WriteString(`,"method":"tools/call","params":{"name":`)
	upAppendString(buf, name)
	buf.WriteString(`,"arguments":`)
	if len(args) == 0 || string(args) == "null" {
		buf.WriteString(`{}`)
	} else {
		buf.Write(args)
	}
	if len(meta) > 0 {
		buf.WriteString(`,"_meta":`)
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(meta); err != nil {
			rb.release()
			return nil, nil, fmt.Errorf("tools/call _meta: %w", err)
		}
	}
	buf.WriteString(`}}`)

	// wrote tells a request the upstream never received (connection
	// refused: upstream_unavailable) from one it received and then dropped
	// without an answer (the tool may have run).
	wrote := new(upWrote)
	//
	// The body is a copy in an io.NopCloser(*bytes.Reader): net/http writes
	// a request's headers and body in one write only for the standard
	// in-memory body types (transfer.go, isKnownInMemoryReader); any other
	// body (the pooled, reference-counted one used before) makes it flush
	// the headers first, so every call reached the upstream as two TCP
	// segments and woke it twice (issue 15 point 2). The transport may
	// still read the body after Do returns, so it cannot be the pooled
	// buffer itself.
	body := bytes.Clone(buf.Bytes())
	rb.release()
	req := c.newRequest(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: wrote.done}), http.MethodPost, s, upHdrAccept, io.NopCloser(bytes.NewReader(body)))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			st.cancelUpstream(ctx)
			return nil, nil, ctx.Err()
		}
		return nil, nil, &upError{Err: err, Delivered: wrote.Load()}
	}

	sc := upGetScratch()
	raw, err := st.run(ctx, resp, sc)
	upPutScratch(sc)
	if err != nil {
		if ctx.Err() != nil {
			st.cancelUpstream(ctx)
			return nil, nil, ctx.Err()
		}
		var ue *upError
		if errors.As(err, &ue) && st.delivered {
			ue.Delivered = true
			if st.foreign && errors.Is(err, errUpStreamEnded) {
				ue.Protocol = true
				ue.Err = fmt.Errorf("%w (the upstream answered another request id)", ue.Err)
			}
		}
		return nil, nil, err
	}
	res, err := upDecodeResult(raw)
	if err != nil {
		return nil, raw, &upError{Status: st.status, Err: fmt.Errorf("decoding tools/call result: %w", err), Delivered: true, Protocol: true}
	}
	return res, raw, nil
}

// upWrote records that a request was written in full (httptrace
// WroteRequest, called on the transport's goroutine).
type upWrote struct{ atomic.Bool }

func (w *upWrote) done(i httptrace.WroteRequestInfo) {
	if i.Err == nil {
		w.Store(true)
	}
}

// newRequest builds a request to the endpoint with the session headers. The
// caller sets Body/GetBody/ContentLength for POSTs.
func (c *upCaller) newRequest(ctx context.Context, method string, s upSession, accept []string, body io.ReadCloser) *http.Request {
	h := make(http.Header, 4)
	h["Accept"] = accept
	if body != nil {
		h["Content-Type"] = upHdrJSON
	}
	if s.ID != "" {
		h["Mcp-Session-Id"] = []string{s.ID}
	}
	if s.ProtocolVersion != "" {
		h["Mcp-Protocol-Version"] = []string{s.ProtocolVersion}
	}
	r := &http.Request{
		Method:     method,
		URL:        c.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Body:       body,
		Host:       c.url.Host,
	}
	return r.WithContext(ctx)
}

// post sends one JSON-RPC message that expects no response (a notification
// or our response to a server request) and discards the reply, which a
// conforming server sends as 202 Accepted without body.
func (c *upCaller) post(ctx context.Context, s upSession, body []byte) error {
	req := c.newRequest(ctx, http.MethodPost, s, upHdrAccept, io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &upError{Status: resp.StatusCode}
	}
	return nil
}

// upCall is the state of one callTool invocation; it lives on the caller's
// stack and is used by one goroutine.
type upCall struct {
	c      *upCaller
	s      upSession
	h      upHandlers
	seq    uint64
	idbuf  [32]byte
	idq    []byte // our id as JSON, `"tg-<seq>"`, backed by idbuf
	budget int64  // bytes we may still read
	status int    // status of the last HTTP response
	retry  time.Duration
	// delivered: the upstream accepted the request (a 2xx response);
	// foreign: it sent a response with an id other than ours.
	delivered, foreign bool
}

// run reads the call's response from resp, resuming the SSE stream with GET
// + Last-Event-ID when the server closes it early after sending event ids.
// It always closes resp.Body. It returns the raw result or an error; on
// ctx cancellation the returned error is whatever the read failed with.
func (st *upCall) run(ctx context.Context, resp *http.Response, sc *upScratch) (json.RawMessage, error) {
	resumes := 0
	var prevID string
	for {
		raw, err := st.readResponse(ctx, resp, sc)
		if raw != nil {
			return raw, err
		}
		if err != nil && (!errors.Is(err, errUpStreamBroken) || len(sc.evID) == 0 || ctx.Err() != nil) {
			return nil, err
		}
		// The stream ended without our response. Per §"Resumability and
		// Redelivery" we may resume it if the server gave event ids.
		if len(sc.evID) == 0 {
			if st.retry > 0 {
				// The server asked for a reconnection (SSE retry field,
				// SEP-1699) but gave no event id to resume from.
				return nil, &upError{Status: st.status, Err: fmt.Errorf("%w (%w: no event id)", errUpStreamEnded, errUpResumeFailed)}
			}
			return nil, &upError{Status: st.status, Err: errUpStreamEnded}
		}
		if id := string(sc.evID); id != prevID {
			prevID, resumes = id, 0
		} else if resumes++; resumes > upMaxResumes {
			return nil, &upError{Status: st.status, Err: fmt.Errorf("%w (%w after %d attempts)", errUpStreamEnded, errUpResumeFailed, upMaxResumes)}
		}
		delay := st.retry
		if delay <= 0 {
			delay = upDefaultRetry << resumes
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		for {
			req := st.c.newRequest(ctx, http.MethodGet, st.s, upHdrAcceptSSE, nil)
			req.Header["Last-Event-Id"] = []string{prevID}
			if resp, err = st.c.client.Do(req); err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// A network error of the resuming GET is retried with the same
			// backoff and bound as a stream that ends again.
			if resumes++; resumes > upMaxResumes {
				return nil, &upError{Err: fmt.Errorf("%w: %w: %w", errUpStreamEnded, errUpResumeFailed, err)}
			}
			if delay = st.retry; delay <= 0 {
				delay = upDefaultRetry << resumes
			}
			t.Reset(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
	}
}

// readResponse consumes one HTTP response: checks the status, then parses an
// application/json body or an SSE stream, dispatching messages until our
// response. It returns (nil, nil) if the body ended without our response.
// It closes resp.Body.
func (st *upCall) readResponse(ctx context.Context, resp *http.Response, sc *upScratch) (json.RawMessage, error) {
	st.status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, upStatusError(resp)
	}
	st.delivered = true
	sc.lim = upLimitReader{r: resp.Body, n: st.budget}
	defer func() { st.budget = sc.lim.n }()
	switch upMediaType(resp.Header.Get("Content-Type")) {
	case "text/event-stream":
		sc.br.Reset(&sc.lim)
		raw, done, err := st.readSSE(ctx, sc)
		if done {
			upDrain(resp.Body)
		}
		resp.Body.Close()
		err = st.readErr(err)
		var ue *upError
		if errors.As(err, &ue) && ue.Status == st.status && errors.Is(err, errUpReadFailed) {
			err = &upError{Status: st.status, Err: fmt.Errorf("%w: %w", errUpStreamBroken, ue.Err)}
		}
		return raw, err
	case "application/json":
		defer resp.Body.Close()
		return st.readJSON(ctx, resp, sc)
	default:
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent {
			return nil, &upError{Status: resp.StatusCode, Err: fmt.Errorf("%w (HTTP %d to a request)", errUpStreamEnded, resp.StatusCode), Protocol: true}
		}
		return nil, &upError{Status: resp.StatusCode, Err: fmt.Errorf("unexpected Content-Type %q", resp.Header.Get("Content-Type")), Protocol: true}
	}
}

// readErr classifies a body read error.
func (st *upCall) readErr(err error) error {
	if err == nil {
		return nil
	}
	var ue *upError
	var je *jsonrpc.Error
	if errors.Is(err, errUpBodyTooLarge) {
		return fmt.Errorf("tools/call: %w (limit %d bytes)", err, st.c.maxBody)
	}
	if errors.As(err, &ue) || errors.As(err, &je) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &upError{Status: st.status, Err: fmt.Errorf("%w: %w", errUpReadFailed, err)}
}

// errUpReadFailed marks readErr's plain read failures.
var errUpReadFailed = errors.New("reading response")

// readJSON handles an application/json response: one JSON-RPC message (or,
// from pre-2025-06-18 servers, a batch array).
func (st *upCall) readJSON(ctx context.Context, resp *http.Response, sc *upScratch) (json.RawMessage, error) {
	if n := resp.ContentLength; n > 0 && n <= st.budget && int64(cap(sc.data)) < n+1 {
		sc.data = make([]byte, 0, n+1)
	}
	data := sc.data[:0]
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := sc.lim.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			sc.data = data
			return nil, st.readErr(err)
		}
	}
	sc.data = data
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(data, &batch); err != nil {
			return nil, &upError{Status: st.status, Err: fmt.Errorf("malformed JSON-RPC batch: %w", err), Protocol: true}
		}
		for _, m := range batch {
			raw, done, err := st.dispatch(ctx, m)
			if done || err != nil {
				return raw, err
			}
		}
		return nil, nil
	}
	raw, _, err := st.dispatch(ctx, data)
	return raw, err
}

// readSSE parses text/event-stream from sc.br until our response (done) or
// the end of the stream. Multi-line data is joined with "\n"; events named
// other than "message" and events without data (priming events) are
// skipped; the id and retry fields are recorded for resumption.
func (st *upCall) readSSE(ctx context.Context, sc *upScratch) (raw json.RawMessage, done bool, err error) {
	br := sc.br
	sc.data = sc.data[:0]
	sc.ev = sc.ev[:0]
	hasData := false
	for {
		line, rerr := br.ReadSlice('\n')
		if rerr == bufio.ErrBufferFull {
			sc.line = append(sc.line[:0], line...)
			for rerr == bufio.ErrBufferFull {
				line, rerr = br.ReadSlice('\n')
				sc.line = append(sc.line, line...)
			}
			line = sc.line
		}
		if rerr != nil && rerr != io.EOF {
			return nil, false, rerr
		}
		eof := rerr == io.EOF
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > 0 && line[0] != ':' {
			field, value := line, []byte(nil)
			if i := bytes.IndexByte(line, ':'); i >= 0 {
				field, value = line[:i], line[i+1:]
				if len(value) > 0 && value[0] == ' ' {
					value = value[1:]
				}
			}
			switch string(field) {
			case "data":
				if hasData {
					sc.data = append(sc.data, '\n')
				}
				sc.data = append(sc.data, value...)
				hasData = true
			case "event":
				sc.ev = append(sc.ev[:0], value...)
			case "id":
				if bytes.IndexByte(value, 0) < 0 {
					sc.evID = append(sc.evID[:0], value...)
				}
			case "retry":
				if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil {
					st.retry = time.Duration(ms) * time.Millisecond
				}
			}
		}
		if len(line) == 0 || eof { // end of event
			if hasData && len(sc.data) > 0 && (len(sc.ev) == 0 || string(sc.ev) == "message") {
				raw, done, err := st.dispatch(ctx, sc.data)
				if done || err != nil {
					return raw, done, err
				}
			}
			sc.data, sc.ev, hasData = sc.data[:0], sc.ev[:0], false
		}
		if eof {
			return nil, false, nil
		}
	}
}

// upMsg is any JSON-RPC message from the upstream.
type upMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// dispatch handles one JSON-RPC message. done reports that it was the
// response to our request; raw is then its result (a private copy).
func (st *upCall) dispatch(ctx context.Context, data []byte) (raw json.RawMessage, done bool, err error) {
	var m upMsg
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, false, &upError{Status: st.status, Err: fmt.Errorf("malformed JSON-RPC message: %w", err), Protocol: true}
	}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	switch {
	case m.Method != "" && hasID:
		return nil, false, st.answer(ctx, &m)
	case m.Method != "":
		if st.h.OnNotification != nil {
			st.h.OnNotification(ctx, m.Method, m.Params)
		}
		return nil, false, nil
	case !hasID && m.Error == nil && len(m.Result) == 0:
		// Not a JSON-RPC message at all (no method, id, result or error).
		return nil, false, &upError{Status: st.status, Err: errors.New("the upstream sent a JSON value that is not a JSON-RPC message"), Protocol: true}
	case !hasID || !st.ours(m.ID):
		st.foreign = true
		return nil, false, nil // not ours (cannot happen with a conforming server)
	case m.Error != nil:
		return nil, true, m.Error
	}
	if reason := badResult(m.Result); reason != "" {
		return nil, true, &upError{Status: st.status, Err: errors.New(reason), Protocol: true}
	}
	return m.Result, true, nil
}

// ours reports whether id is our request id.
func (st *upCall) ours(id json.RawMessage) bool {
	if bytes.Equal(id, st.idq) {
		return true
	}
	var s string // tolerate a different but equivalent string encoding
	return id[0] == '"' && json.Unmarshal(id, &s) == nil && s == string(st.idq[1:len(st.idq)-1])
}

// answer responds to a server→client request with a POST on the session.
// Delivery failures are ignored (the stream then ends or the server times
// out its request); only ctx cancellation is reported.
func (st *upCall) answer(ctx context.Context, m *upMsg) error {
	var res any
	var rerr *jsonrpc.Error
	if st.h.OnRequest != nil {
		res, rerr = st.h.OnRequest(ctx, m.Method, m.Params)
	} else {
		res, rerr = upDefaultRequest(m.Method)
	}
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(m.ID)
	if rerr == nil {
		out := []byte(`{}`)
		if res != nil {
			var err error
			if out, err = json.Marshal(res); err != nil {
				rerr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding result: " + err.Error()}
			}
		}
		if rerr == nil {
			b.WriteString(`,"result":`)
			b.Write(out)
		}
	}
	if rerr != nil {
		out, _ := json.Marshal(rerr)
		b.WriteString(`,"error":`)
		b.Write(out)
	}
	b.WriteString(`}`)
	if err := st.c.post(ctx, st.s, b.Bytes()); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// cancelUpstream POSTs notifications/cancelled for our request in the
// background (best effort, upNotifyTimeout), so that the caller returns
// promptly. The go-sdk server cancels the tool handler's context on it.
func (st *upCall) cancelUpstream(ctx context.Context) {
	reason := "cancelled"
	if err := ctx.Err(); err != nil {
		reason = err.Error()
	}
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`)
	b.Write(st.idq)
	b.WriteString(`,"reason":`)
	upAppendString(&b, reason)
	b.WriteString(`}}`)
	c, s, body := st.c, st.s, b.Bytes()
	nctx := context.WithoutCancel(ctx)
	go func() {
		ctx, cancel := context.WithTimeout(nctx, upNotifyTimeout)
		defer cancel()
		_ = c.post(ctx, s, body)
	}()
}

// upStatusError builds the *upError for a non-2xx response.
func upStatusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	e := &upError{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	var m upMsg
	if json.Unmarshal(body, &m) == nil && m.Error != nil {
		e.RPC = m.Error
	}
	return e
}

// upDrain reads what is left of an SSE body after our response, bounded in
// bytes and time, so the connection can be reused. The server normally ends
// the stream right after the response.
func upDrain(body io.ReadCloser) {
	t := time.AfterFunc(upDrainTimeout, func() { body.Close() })
	io.CopyN(io.Discard, body, upDrainMax)
	t.Stop()
}

// upMediaType returns the lower-cased media type of a Content-Type value.
func upMediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	switch {
	case strings.EqualFold(ct, "text/event-stream"):
		return "text/event-stream"
	case strings.EqualFold(ct, "application/json"):
		return "application/json"
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt
}

// upAppendString writes s as a JSON string (RFC 8785 form; invalid UTF-8
// becomes U+FFFD): canonjson.AppendString, the module's one escaper.
func upAppendString(b *bytes.Buffer, s string) {
	b.Write(canonjson.AppendString(b.AvailableBuffer(), s, canonjson.Canonical))
}

// upFastResult is the wire shape of a CallToolResult whose content is all
// text, decoded with encoding/json. Anything else falls back to the go-sdk
// decoder (mcp.CallToolResult.UnmarshalJSON).
type upFastResult struct {
	Meta              mcp.Meta        `json:"_meta"`
	Content           []upFastContent `json:"content"`
	StructuredContent any             `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	ResultType        json.RawMessage `json:"resultType"`
}

// upFastContent is a text content block on the wire.
type upFastContent struct {
	Type        string           `json:"type"`
	Text        string           `json:"text"`
	Meta        mcp.Meta         `json:"_meta"`
	Annotations *mcp.Annotations `json:"annotations"`
}

// upDecodeResult decodes a tools/call result into the same value the go-sdk
// client produces: text-only results (the common case) via encoding/json
// into a mirror struct, anything else via mcp.CallToolResult.UnmarshalJSON.
func upDecodeResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	var f upFastResult
	if err := json.Unmarshal(raw, &f); err == nil && len(f.ResultType) == 0 && upAllText(f.Content) {
		res := &mcp.CallToolResult{
			Meta:              f.Meta,
			Content:           make([]mcp.Content, len(f.Content)),
			StructuredContent: f.StructuredContent,
			IsError:           f.IsError,
		}
		texts := make([]mcp.TextContent, len(f.Content))
		for i := range f.Content {
			texts[i] = mcp.TextContent{Text: f.Content[i].Text, Meta: f.Content[i].Meta, Annotations: f.Content[i].Annotations}
			res.Content[i] = &texts[i]
		}
		return res, nil
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, err
	}
	return res, nil
}

// upAllText reports whether every block is text.
func upAllText(cs []upFastContent) bool {
	for i := range cs {
		if cs[i].Type != "text" {
			return false
		}
	}
	return true
}

// upLimitReader reads at most n more bytes from r and reports
// errUpBodyTooLarge if r has more.
type upLimitReader struct {
	r io.Reader
	n int64
}

// Read implements io.Reader.
func (l *upLimitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errUpBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// upScratch is the pooled per-call read state.
type upScratch struct {
	lim  upLimitReader
	br   *bufio.Reader
	data []byte // SSE event data, or the JSON body
	line []byte // assembly buffer for SSE lines longer than br's buffer
	ev   []byte // SSE event name
	evID []byte // last SSE event id
}

// upScratchPool holds *upScratch.
var upScratchPool = sync.Pool{New: func() any {
	return &upScratch{br: bufio.NewReaderSize(nil, upReadBufSize), data: make([]byte, 0, 4<<10)}
}}

// upGetScratch returns pooled read state with no remembered event id.
func upGetScratch() *upScratch {
	sc := upScratchPool.Get().(*upScratch)
	sc.evID = sc.evID[:0]
	return sc
}

// upPutScratch returns sc to the pool unless its buffers grew too large.
func upPutScratch(sc *upScratch) {
	sc.lim = upLimitReader{}
	sc.br.Reset(nil)
	if cap(sc.data) > upPoolMaxBuf || cap(sc.line) > upPoolMaxBuf {
		return
	}
	upScratchPool.Put(sc)
}

// upReqBody is a pooled buffer callTool builds a request body in; the
// request carries a copy (see callTool).
type upReqBody struct{ buf bytes.Buffer }

// upReqBodyPool holds *upReqBody.
var upReqBodyPool = sync.Pool{New: func() any { return new(upReqBody) }}

// upGetReqBody returns an empty pooled body buffer.
func upGetReqBody() *upReqBody {
	rb := upReqBodyPool.Get().(*upReqBody)
	rb.buf.Reset()
	return rb
}

// release returns rb to the pool unless it grew too large.
func (rb *upReqBody) release() {
	if rb.buf.Cap() <= upPoolMaxBuf {
		upReqBodyPool.Put(rb)
	}
}
