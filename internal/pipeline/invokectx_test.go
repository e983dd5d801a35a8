package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type ctxKey string

// pairCtx is an invokeContext next to the context.WithTimeout it stands
// for, over the same parent.
type pairCtx struct {
	lazy   *invokeContext
	ref    context.Context
	cancel context.CancelFunc
}

func newPair(parent context.Context, timeout time.Duration) *pairCtx {
	p := &pairCtx{lazy: new(invokeContext)}
	p.lazy.init(parent, time.Now(), timeout)
	p.ref, p.cancel = context.WithTimeout(parent, timeout)
	return p
}

func (p *pairCtx) stop() {
	p.lazy.stop()
	p.cancel()
}

// done reports whether ctx's Done channel is closed.
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// same checks that the two contexts agree on everything observable; with
// look, it also calls Done first (which makes the lazy context real).
func (p *pairCtx) same(t *testing.T, what string, look bool) {
	t.Helper()
	lazy := context.Context(p.lazy)
	if look && done(lazy) != done(p.ref) {
		t.Errorf("%s: Done closed %v, reference %v", what, done(lazy), done(p.ref))
	}
	if a, b := lazy.Err(), p.ref.Err(); !errors.Is(a, b) || (a == nil) != (b == nil) {
		t.Errorf("%s: Err %v, reference %v", what, a, b)
	}
	if a, b := context.Cause(lazy), context.Cause(p.ref); a != b {
		t.Errorf("%s: Cause %v, reference %v", what, a, b)
	}
	if a, b := lazy.Value(ctxKey("k")), p.ref.Value(ctxKey("k")); a != b {
		t.Errorf("%s: Value %v, reference %v", what, a, b)
	}
	da, oka := lazy.Deadline()
	db, okb := p.ref.Deadline()
	// newPair makes the lazy context first: its deadline is at most as late.
	if oka != okb || da.After(db) || db.Sub(da) > 5*time.Second {
		t.Errorf("%s: Deadline %v %v, reference %v %v", what, da, oka, db, okb)
	}
	// A context derived now behaves alike.
	ca, stopA := context.WithCancel(lazy)
	cb, stopB := context.WithCancel(p.ref)
	defer stopA()
	defer stopB()
	if done(ca) != done(cb) || !errors.Is(ca.Err(), cb.Err()) || context.Cause(ca) != context.Cause(cb) {
		t.Errorf("%s: derived context: done %v/%v, err %v/%v, cause %v/%v", what, done(ca), done(cb), ca.Err(), cb.Err(), context.Cause(ca), context.Cause(cb))
	}
}

func TestCauseKeyFound(t *testing.T) {
	if causeKey == nil {
		t.Fatal("the key context.Cause looks causes up by was not found")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("x"))
	if ctx.Value(causeKey) == nil {
		t.Fatal("causeKey does not find a cancelCtx")
	}
}

func TestInvokeContextMatchesWithTimeout(t *testing.T) {
	errParent := errors.New("parent's cause")
	bg := context.WithValue(context.Background(), ctxKey("k"), "v")
	for _, look := range []bool{false, true} {
		name := func(s string) string { return fmt.Sprintf("%s (look %v)", s, look) }

		p := newPair(bg, time.Hour)
		p.same(t, name("running"), look)
		p.stop()
		p.same(t, name("stopped"), look)
		p.same(t, name("stopped, again"), true)

		// The states are compared only where timing cannot make them differ:
		// before a deadline far away, or once the reference has seen its
		// deadline pass (its timer fires a little after it).
		p = newPair(bg, 20*time.Millisecond)
		waitDone(t, p.ref)
		p.same(t, name("short, expired"), look)
		p.stop()
		p.same(t, name("short, expired, stopped"), look)

		parent, cancelParent := context.WithCancelCause(bg)
		p = newPair(parent, time.Hour)
		p.same(t, name("parent running"), look)
		cancelParent(errParent)
		p.same(t, name("parent cancelled"), look)
		p.stop()
		p.same(t, name("parent cancelled, stopped"), look)

		parent, cancelParent = context.WithCancelCause(bg)
		p = newPair(parent, time.Hour)
		p.stop()
		cancelParent(errParent)
		p.same(t, name("stopped, then parent cancelled"), look)

		parent, cancelTimeout := context.WithTimeout(bg, time.Hour)
		p = newPair(parent, 2*time.Hour) // the parent's deadline is sooner
		p.same(t, name("parent's deadline first"), look)
		if a, b := stripTimes(p.lazy.String()), stripTimes(fmt.Sprint(p.ref)); !strings.HasSuffix(a, ".WithCancel") || a != b {
			t.Errorf("String %q, reference %q", a, b)
		}
		p.stop()
		p.same(t, name("parent's deadline first, stopped"), look)
		cancelTimeout()

		parent, cancelTimeout = context.WithTimeout(bg, 20*time.Millisecond)
		p = newPair(parent, time.Hour)
		waitDone(t, p.ref)
		p.same(t, name("parent's deadline passed"), look)
		p.stop()
		p.same(t, name("parent's deadline passed, stopped"), look)
		cancelTimeout()
	}
}

// waitDone waits until ctx is done.
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the reference context is not done after its deadline")
	}
}

// stripTimes removes the deadline and time left from a context's String.
func stripTimes(s string) string {
	for {
		i := strings.Index(s, "WithDeadline(")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "])")
		if j < 0 {
			return s
		}
		s = s[:i] + "WithDeadline#" + s[i+j+2:]
	}
}

func TestInvokeContextString(t *testing.T) {
	p := newPair(context.Background(), time.Hour)
	defer p.stop()
	a, b := p.lazy.String(), fmt.Sprint(p.ref)
	if stripTimes(a) != stripTimes(b) || !strings.Contains(a, ".WithDeadline("+p.lazy.deadline.String()+" [") {
		t.Errorf("String %q, reference %q", a, b)
	}
	var c invokeContext
	defer func() {
		if r := recover(); r == nil {
			t.Error("init with a nil parent did not panic")
		}
	}()
	c.init(nil, time.Now(), time.Second)
}

// TestInvokeContextWaits checks that a tool waiting on Done is woken by the
// deadline, by the parent's cancellation and by stop, and that AfterFunc
// works on it.
func TestInvokeContextWaits(t *testing.T) {
	var c invokeContext
	c.init(context.Background(), time.Now(), 20*time.Millisecond)
	fired := make(chan struct{})
	context.AfterFunc(&c, func() { close(fired) })
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	<-fired
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(&c), context.DeadlineExceeded) {
		t.Fatalf("Err %v, Cause %v", c.Err(), context.Cause(&c))
	}
	c.stop()

	parent, cancel := context.WithCancel(context.Background())
	var d invokeContext
	d.init(parent, time.Now(), time.Hour)
	go cancel()
	<-d.Done()
	if !errors.Is(d.Err(), context.Canceled) {
		t.Fatalf("Err %v after the parent's cancel", d.Err())
	}
	d.stop()

	var e invokeContext
	e.init(context.Background(), time.Now(), time.Hour)
	ch := e.Done()
	e.stop()
	<-ch
	if !errors.Is(e.Err(), context.Canceled) {
		t.Fatalf("Err %v after stop", e.Err())
	}
}
