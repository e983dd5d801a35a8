package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// invokeContext is the context a tool runs under: what
// context.WithTimeout(parent, timeout) returns, with the same Deadline,
// Done, Err, Value, Cause and String, but built lazily. Most tools never
// wait on their context, so the underlying context.WithDeadline (a context,
// a timer and a cancel function, registered with the parent) is made only
// when something needs it: Done, or the lookup context.Cause makes. Until
// then Err is computed (the parent's error, else DeadlineExceeded once the
// deadline has passed), and stop, the cancel function, only records the
// error the context would then have.
//
// The one difference is timing: a timer fires a little after its deadline,
// while the computed Err reports DeadlineExceeded from the deadline on.
// Either is a schedule context.WithTimeout may produce.
//
// Call init before use and stop after the tool returns; the methods are
// safe for concurrent use, also after stop (a tool may keep its context).
type invokeContext struct {
	parent      context.Context
	deadline    time.Time // now + timeout, as context.WithTimeout computes it
	parentFirst bool      // the parent's deadline is sooner: no timer of ours

	mu      sync.Mutex
	real    context.Context // context.WithDeadline(parent, deadline), once made
	cancel  context.CancelFunc
	stopped bool  // stop ran before real was made
	err     error // then: the error real would have had
}

// init sets c up as context.WithTimeout(parent, timeout) would at time now
// (time.Now(), which the caller has just read).
func (c *invokeContext) init(parent context.Context, now time.Time, timeout time.Duration) {
	if parent == nil {
		panic("cannot create context from nil parent")
	}
	c.parent, c.deadline = parent, now.Add(timeout)
	if d, ok := parent.Deadline(); ok && d.Before(c.deadline) {
		c.parentFirst = true // context.WithDeadline returns WithCancel(parent)
	}
}

// materialize returns real, making it first if needed; nil once stop ran
// without it. c.mu is held.
func (c *invokeContext) materialize() context.Context {
	if c.real == nil && !c.stopped {
		c.real, c.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	return c.real
}

// lazyErr is the error real would have now: the parent's, else
// DeadlineExceeded once c's own deadline has passed.
func (c *invokeContext) lazyErr() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !c.parentFirst && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// stop is the context's cancel function: it cancels real if it was made,
// and otherwise records the error real would have after its cancel.
// Idempotent.
func (c *invokeContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.real != nil:
		c.cancel()
	case c.stopped:
	case c.parent.Err() != nil:
		// The parent is done: let package context record its cause.
		c.materialize()
		c.cancel()
	default:
		c.err = c.lazyErr() // nil or DeadlineExceeded
		if c.err == nil {
			c.err = context.Canceled
		}
		c.stopped = true
	}
}

// Deadline returns the sooner of the parent's deadline and c's.
func (c *invokeContext) Deadline() (time.Time, bool) {
	if c.parentFirst {
		return c.parent.Deadline()
	}
	return c.deadline, true
}

// Done returns real's channel, making real if needed; after a stop without
// real, a closed channel.
func (c *invokeContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.materialize(); r != nil {
		return r.Done()
	}
	return closedChan
}

// Err returns real's error, or the error it would have.
func (c *invokeContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.real != nil:
		return c.real.Err()
	case c.stopped:
		return c.err
	}
	return c.lazyErr()
}

// Value returns the parent's value for key, as real does, except for the
// key context.Cause looks a context's cause up by: that is real's (made if
// needed), or, after a stop without real, none, so that Cause returns Err,
// which is the cause real would have (Canceled or DeadlineExceeded).
func (c *invokeContext) Value(key any) any {
	if key != nil && key == causeKey {
		c.mu.Lock()
		r := c.materialize()
		c.mu.Unlock()
		if r == nil {
			return nil
		}
		return r.Value(key)
	}
	return c.parent.Value(key)
}

// String describes c as real's String does.
func (c *invokeContext) String() string {
	name := fmt.Sprintf("%T", c.parent)
	if s, ok := c.parent.(fmt.Stringer); ok {
		name = s.String()
	}
	if c.parentFirst {
		return name + ".WithCancel"
	}
	return name + ".WithDeadline(" + c.deadline.String() + " [" + time.Until(c.deadline).String() + "])"
}

// closedChan is the Done channel of a stopped invokeContext.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// causeKey is the key context.Cause passes to Value to find a context's
// cause (package context's unexported cancelCtxKey), learnt once by letting
// Cause ask a probe.
var causeKey = func() any {
	p := new(keyProbe)
	_ = context.Cause(p)
	return p.key
}()

// keyProbe records the key of a Value call. Cause calls only Err and Value.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Err() error { return context.Canceled }

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}
