package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/store"
)

// sseStream is an open GET /ui/api/v1/events/stream: its lines arrive on
// lines, which is closed at the stream's end.
type sseStream struct {
	lines <-chan string
}

// openStream opens the console's live audit stream as cl and waits for
// its opening comment (the server follows the store from then on).
func (f *fixture) openStream(t *testing.T, cl *http.Client) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/ui/api/v1/events/stream", nil)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	if l := <-ch; !strings.HasPrefix(l, ": toolgate event stream") {
		t.Fatalf("stream opened with %q", l)
	}
	return &sseStream{lines: ch}
}

// next returns the next data line (skipping comments and ids), or "" with
// ended true when the stream ended first.
func (s *sseStream) next(t *testing.T) (data string, ended bool, comments []string) {
	t.Helper()
	for l := range s.lines {
		switch {
		case strings.HasPrefix(l, "data: "):
			return l, false, comments
		case strings.HasPrefix(l, ": "):
			comments = append(comments, l)
		}
	}
	return "", true, comments
}

func (f *fixture) appendEvent(t *testing.T, run string) {
	t.Helper()
	ev, err := audit.NewEvent(run, audit.TypeSessionOpened, map[string]any{}, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.Tenant, ev.Principal = "a", "alice"
	if err := f.events.AppendEvents(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// Review defect 1: an open live-audit stream ends at sign-out and never
// delivers an event stored after it.
func TestStreamEndsAtSignOut(t *testing.T) {
	f := newFixture(t, false, nil)
	f.authn.cur.Store(newAuth(t, aliceKey))
	cl := f.client(t)
	f.signIn(t, cl, "k-alice")
	csrf := f.csrf(t, cl)
	st := f.openStream(t, cl)
	f.appendEvent(t, "run-before")
	if d, ended, _ := st.next(t); ended || !strings.Contains(d, "run-before") {
		t.Fatalf("the event before sign-out: %q ended=%v", d, ended)
	}
	if a := f.post(t, cl, "/ui/signout", "application/x-www-form-urlencoded", "csrf="+url.QueryEscape(csrf), nil); a.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", a.status)
	}
	f.appendEvent(t, "run-after")
	d, ended, comments := st.next(t)
	if !ended || d != "" {
		t.Fatalf("after sign-out the stream delivered %q (ended %v)", d, ended)
	}
	if !strings.Contains(strings.Join(comments, "\n"), "session ended") {
		t.Errorf("the stream's last comments %q do not say why it ended", comments)
	}
}

// Review defect 1: a stream ends when its session's credential stops
// passing Recheck (a reload removed the key), before delivering another
// event.
func TestStreamEndsWhenKeyRemoved(t *testing.T) {
	f := newFixture(t, false, nil)
	cl := f.client(t)
	f.signIn(t, cl, "k-alice")
	st := f.openStream(t, cl)
	f.authn.cur.Store(newAuth(t, bobKey))
	f.appendEvent(t, "run-after-reload")
	if d, ended, _ := st.next(t); !ended {
		t.Fatalf("after the key was removed the stream delivered %q", d)
	}
}

// Review defect 1: a stream ends at its session's expiry (the session's
// end time, here a second after sign-in, with a real clock).
func TestStreamEndsAtSessionExpiry(t *testing.T) {
	f := newFixture(t, false, func(o *Options) { o.SessionTTL = time.Second })
	cl := f.client(t)
	f.signIn(t, cl, "k-alice")
	start := time.Now()
	st := f.openStream(t, cl)
	_, ended, comments := st.next(t)
	if !ended || time.Since(start) > 15*time.Second {
		t.Fatalf("stream ended=%v", ended)
	}
	if !strings.Contains(strings.Join(comments, "\n"), "expired") {
		t.Errorf("comments %q", comments)
	}
}

// Review defect 2: 40 sign-ins of one key (a cap of 40) never lock out
// another principal; the key keeps its 16 newest sessions.
func TestSignInPerPrincipalCap(t *testing.T) {
	f := newFixture(t, false, func(o *Options) { o.MaxSessions = 40 })
	f.authn.cur.Store(newAuth(t, aliceKey, bobKey))
	var first *http.Client
	for i := range 40 {
		cl := f.client(t)
		if a := f.signIn(t, cl, "k-alice"); a.status != http.StatusSeeOther {
			t.Fatalf("alice's sign-in %d: %d", i, a.status)
		}
		if i == 0 {
			first = cl
		}
	}
	if n := f.c.sessions.count(); n != DefaultMaxSessionsPerPrincipal {
		t.Errorf("alice holds %d sessions, want %d", n, DefaultMaxSessionsPerPrincipal)
	}
	if a := f.get(t, first, "/ui/api/v1/tools"); a.status != http.StatusUnauthorized {
		t.Errorf("alice's oldest session after 40 sign-ins: %d, want 401 (evicted)", a.status)
	}
	if a := f.signIn(t, f.client(t), "k-bob"); a.status != http.StatusSeeOther {
		t.Errorf("bob's sign-in after alice's 40: %d", a.status)
	}
}

// recordingApprovals is an approval inbox that records decisions.
type recordingApprovals struct {
	mu      sync.Mutex
	reasons []string
}

func (r *recordingApprovals) List(context.Context, string, store.ApprovalStatus) ([]store.Approval, error) {
	return nil, nil
}
func (r *recordingApprovals) Resolve(_ context.Context, p identity.Principal, id string, approve bool, reason string) (*store.Approval, error) {
	r.mu.Lock()
	r.reasons = append(r.reasons, reason)
	r.mu.Unlock()
	return &store.Approval{ID: id, Tenant: p.Tenant, Principal: "bob", ToolID: "native:echo", Status: store.ApprovalApproved}, nil
}

// Review defect 3: the approve route takes the CSRF token as the csrf form
// field (and the reason field) as well as the header.
func TestApproveWithCSRFFormField(t *testing.T) {
	rec := &recordingApprovals{}
	f := newFixture(t, false, func(o *Options) { o.API.Approvals = rec })
	admin := aliceKey
	admin.Scopes = []string{"toolgate:approve"}
	f.authn.cur.Store(newAuth(t, admin))
	cl := f.client(t)
	f.signIn(t, cl, "k-alice")
	csrf := f.csrf(t, cl)
	form := "application/x-www-form-urlencoded"
	if a := f.post(t, cl, "/ui/api/v1/approvals/ap1/approve", form, url.Values{"csrf": {csrf}, "reason": {"looks fine"}}.Encode(), nil); a.status != http.StatusOK || !strings.Contains(a.body, `"ap1"`) {
		t.Errorf("approve with the csrf form field: %d %s", a.status, a.body)
	}
	if a := f.post(t, cl, "/ui/api/v1/approvals/ap1/approve", form, url.Values{"csrf": {"x" + csrf}}.Encode(), nil); a.status != http.StatusForbidden {
		t.Errorf("approve with a wrong csrf form field: %d", a.status)
	}
	if a := f.post(t, cl, "/ui/api/v1/approvals/ap1/deny", "application/json", `{"reason":"no"}`, http.Header{CSRFHeader: {csrf}}); a.status != http.StatusOK {
		t.Errorf("deny with the header: %d %s", a.status, a.body)
	}
	if a := f.post(t, cl, "/ui/api/v1/approvals/ap1/deny", form, "", nil); a.status != http.StatusForbidden {
		t.Errorf("deny without a token: %d", a.status)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if fmt.Sprint(rec.reasons) != "[looks fine no]" {
		t.Errorf("decisions reached the inbox with reasons %q", rec.reasons)
	}
}

// Review defect 4: a sign-in body that trickles in past the connection's
// read deadline answers 408 timeout, not 400.
func TestSignInSlowBody408(t *testing.T) {
	f := newFixtureServer(t, false, nil, func(s *http.Server) { s.ReadTimeout = 500 * time.Millisecond })
	cl := f.client(t)
	page := f.get(t, cl, "/ui/signin")
	tok := signinCSRF.FindStringSubmatch(page.body)[1]
	body := "csrf=" + url.QueryEscape(tok) + "&credential=k-alice"
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /ui/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nCookie: %s=%s\r\nContent-Length: %d\r\n\r\n",
		signinCookie, tok, len(body))
	// Send the body a byte at a time until the server answers: it stops
	// reading at its read deadline and answers.
	answered := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(bufio.NewReader(conn))
		answered <- string(b)
	}()
	tick := time.NewTicker(50 * time.Millisecond) // a slow client's pace
	defer tick.Stop()
	var ans string
	for i := 0; ans == ""; {
		select {
		case ans = <-answered:
		case <-tick.C:
			if i < len(body)-1 { // never the last byte
				conn.Write([]byte{body[i]})
				i++
			}
		case <-time.After(15 * time.Second):
			t.Fatal("no answer to a trickling sign-in body")
		}
	}
	if !strings.HasPrefix(ans, "HTTP/1.1 408 ") || !strings.Contains(ans, "timeout") {
		t.Errorf("a trickling sign-in body: %q, want 408 timeout", ans)
	}
}

var _ httpapi.StreamAuthenticator = sessionAuth{}
