package mcpgw

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
)

// Hostile upstreams (issue 13 points 5 and 12): a stdio server and a
// Streamable HTTP server that accept a tools/call and then crash, answer
// garbage, a wrong id, a JSON value that is not JSON-RPC, or "result": null.
// Each such call reached the upstream, so the tool may have run: it must be
// recorded status error with a specific code, durationMs and
// details.ran = "unknown", never upstream_unavailable without durationMs
// (OpenWOP RFC 0064 §F) nor an empty success.

// hostileEnv, when set, makes the test binary a hostile stdio MCP server.
const hostileEnv = "TOOLGATE_TEST_HOSTILE_STDIO"

func TestMain(m *testing.M) {
	if os.Getenv(hostileEnv) == "1" {
		hostileStdio(os.Stdin, os.Stdout)
		os.Exit(0)
	}
	if os.Getenv(echoHTTPEnv) == "1" {
		echoHTTPProcess()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hostileTools are the tools both hostile servers list; each name says how
// its tools/call is answered.
var hostileTools = []string{"ok", "null", "garbage", "nonrpc", "wrongid", "crash"}

type hostileReq struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Name            string `json:"name"`
	} `json:"params"`
}

// hostileAnswer is the JSON-RPC answer of the hostile servers to anything
// but tools/call, or nil for a notification.
func hostileAnswer(req *hostileReq) []byte {
	var result any
	switch req.Method {
	case "initialize":
		result = map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "hostile", "version": "1"}}
	case "tools/list":
		var tools []any
		for _, n := range hostileTools {
			tools = append(tools, map[string]any{"name": n, "inputSchema": map[string]any{"type": "object"}})
		}
		result = map[string]any{"tools": tools}
	default:
		result = map[string]any{}
	}
	if len(req.ID) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	return b
}

// hostileCall is the body the hostile servers answer tools/call name with;
// crash is handled by each server.
func hostileCall(id json.RawMessage, name string) string {
	switch name {
	case "null":
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, id)
	case "garbage":
		return `this is not JSON`
	case "nonrpc":
		return `{"hello":"world"}`
	case "wrongid":
		return `{"jsonrpc":"2.0","id":"not-yours","result":{"content":[]}}`
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"fine"}]}}`, id)
}

// hostileStdio serves the hostile tools over newline-delimited stdio; crash
// exits the process with the call unanswered.
func hostileStdio(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req hostileReq
		if json.Unmarshal(sc.Bytes(), &req) != nil {
			continue
		}
		if req.Method != "tools/call" {
			if b := hostileAnswer(&req); b != nil {
				fmt.Fprintf(out, "%s\n", b)
			}
			continue
		}
		if req.Params.Name == "crash" {
			os.Exit(3)
		}
		fmt.Fprintf(out, "%s\n", hostileCall(req.ID, req.Params.Name))
	}
}

// startHostileHTTP serves the hostile tools over Streamable HTTP; crash
// starts an SSE response and then drops the connection.
func startHostileHTTP(t *testing.T) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodDelete:
			return
		case http.MethodPost:
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req hostileReq
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Mcp-Session-Id", "hostile-1")
		if req.Method != "tools/call" {
			b := hostileAnswer(&req)
			if b == nil {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
			return
		}
		if req.Params.Name == "crash" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileCall(req.ID, req.Params.Name))
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// gatewayErrorCode is the code of a gateway-made isError result: from
// _meta["toolgate/error"] or else structuredContent.error.
func gatewayErrorCode(res *mcp.CallToolResult) string {
	if e, ok := res.Meta["toolgate/error"].(map[string]any); ok {
		c, _ := e["code"].(string)
		return c
	}
	return errorCode(res)
}

// returnedDetails is the agent.toolReturned error.details of res's call.
func (e *e2eGateway) returnedDetails(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	runID, callID := metaString(t, res, MetaRunID), metaString(t, res, MetaCallID)
	evs, err := e.st.EventsByRun(t.Context(), tenant, runID, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		var p struct {
			CallID string `json:"callId"`
			Error  *struct {
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if ev.Type == audit.TypeToolReturned && json.Unmarshal(ev.Payload, &p) == nil && p.CallID == callID && p.Error != nil {
			return p.Error.Details
		}
	}
	return nil
}

func TestHostileUpstreamRecordsWhatHappened(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpURL := startHostileHTTP(t)
	e := startGateway(t, fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
servers:
  - {name: hs, command: [%s, "-test.run=^$"], env: {%s: "1"}}
  - {name: hh, url: %s}
policy:
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, auth.HashKey(keyAlice), tenant, yamlQuote(exe), hostileEnv, yamlQuote(httpURL)))
	cs := e.connect(t, keyAlice)

	// restarted waits until the session's stdio server is a process other
	// than pid, connected (the previous case ended its session).
	restarted := func(t *testing.T, pid int) {
		t.Helper()
		deadline := time.Now().Add(e2eWait)
		for {
			if p, ok := e.gw.Process(cs.ID(), "hs"); ok && p != pid {
				ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
				defer cancel()
				if err := e.gw.WaitUpstream(ctx, cs.ID(), "hs"); err != nil {
					t.Fatalf("the stdio server was not restarted: %v", err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stdio server %d was not replaced", pid)
			}
			select { // poll the condition
			case <-t.Context().Done():
				t.Fatal("test context ended")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	cases := []struct {
		server, tool, code string
		kills              bool // the upstream's session ends with the call
	}{
		{"hs", "null", "upstream_protocol_error", false},
		{"hs", "garbage", "upstream_protocol_error", true},
		{"hs", "nonrpc", "upstream_protocol_error", true},
		{"hs", "crash", "upstream_crashed", true},
		{"hh", "null", "upstream_protocol_error", false},
		{"hh", "garbage", "upstream_protocol_error", false},
		{"hh", "nonrpc", "upstream_protocol_error", false},
		{"hh", "wrongid", "upstream_protocol_error", false},
		{"hh", "crash", "upstream_crashed", false},
	}
	for _, c := range cases {
		name := c.server + "__" + c.tool
		t.Run(c.server+"_"+c.tool, func(t *testing.T) {
			pid, _ := e.gw.Process(cs.ID(), c.server)
			res := callTool(t, cs, name, map[string]any{})
			if !res.IsError || gatewayErrorCode(res) != c.code {
				raw, _ := json.Marshal(res)
				t.Fatalf("%s: want isError %s, got %s", name, c.code, raw)
			}
			_, ret := e.callEvents(t, res)
			if ret.Status != string(audit.StatusError) || ret.Error == nil || ret.Error.Code != c.code || ret.DurationMs == nil {
				t.Errorf("%s: agent.toolReturned %+v; want status error, %s, with durationMs (the request reached the upstream)", name, ret, c.code)
			}
			if d := e.returnedDetails(t, res); d["ran"] != "unknown" {
				t.Errorf("%s: error.details %v; want ran: unknown", name, d)
			}
			if c.kills {
				restarted(t, pid)
			}
		})
	}
	// A well-behaved call on each still succeeds.
	for _, server := range []string{"hs", "hh"} {
		res := callTool(t, cs, server+"__ok", map[string]any{})
		if res.IsError || resultText(res) != "fine" {
			t.Errorf("%s__ok: %+v", server, res)
		}
	}
}
