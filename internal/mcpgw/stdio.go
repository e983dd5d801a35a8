package mcpgw

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stopGrace is how long stopping a stdio server waits at each step: after
// closing its stdin for it to exit, after SIGTERM to its process group for
// the group to end, before SIGKILL.
const stopGrace = 2 * time.Second

// baseEnv are the variables of the gateway's environment every stdio server
// gets (issue 12 §3): what finding programs, a home and temporary directory,
// the time zone and the locale need; LC_* are matched by prefix.
var baseEnv = []string{"PATH", "HOME", "TMPDIR", "TZ", "LANG", "LANGUAGE"}

// stdioEnv is the environment of a stdio server: from environ (the
// gateway's, KEY=value), the variables of baseEnv, LC_* and inherit, then
// own (KEY=value, the server's env:), which wins over an inherited value of
// the same name.
func stdioEnv(environ, inherit, own []string) []string {
	keep := map[string]bool{}
	for _, k := range baseEnv {
		keep[k] = true
	}
	for _, k := range inherit {
		keep[k] = true
	}
	mine := map[string]bool{}
	for _, kv := range own {
		k, _, _ := strings.Cut(kv, "=")
		mine[k] = true
	}
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || mine[k] || !(keep[k] || strings.HasPrefix(k, "LC_")) {
			continue
		}
		out = append(out, kv)
	}
	return append(out, own...)
}

// stdioTransport runs a stdio MCP server in its own process group and
// speaks newline-delimited JSON to it over stdin/stdout, as
// mcp.CommandTransport does; unlike it, every stop (the session's close)
// and every exit of the server ends the whole group, so helpers the server
// spawned do not outlive it (issue 12 §5).
type stdioTransport struct {
	cmd *exec.Cmd // not yet started; Stdin and Stdout must be unset
}

// Connect starts the command.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	t.cmd.Stdin, t.cmd.Stdout = inR, outW
	setProcessGroup(t.cmd)
	err = t.cmd.Start()
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		inW.Close()
		return nil, err
	}
	p := &stdioProc{cmd: t.cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), ended: make(chan struct{}), eof: make(chan struct{})}
	go p.watch()
	return (&mcp.IOTransport{Reader: stdioReader{p}, Writer: p}).Connect(ctx)
}

// stdioProc is one started stdio server. Its Write and Close are the
// connection's writer (Close stops the server); stdioReader its reader.
type stdioProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File

	exited chan struct{} // closed when the server process has exited (and been waited for)
	ended  chan struct{} // closed when what was left of its process group has ended too
	eof    chan struct{} // closed when stdout reached its end
	eofMu  sync.Once

	closeOnce sync.Once
}

// watch waits for the server to exit, however that happens, then ends the
// rest of its process group (the helpers it left) and, once every holder
// of its stdout is gone, lets the reader see the end.
func (p *stdioProc) watch() {
	p.cmd.Wait()
	close(p.exited)
	endGroup(p.cmd, stopGrace)
	close(p.ended)
	// A helper that left the group (setsid) may still hold stdout open;
	// the session must end anyway.
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.eof:
	case <-t.C:
		p.stdout.Close()
	}
}

func (p *stdioProc) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close stops the server as the MCP stdio transport asks (close its stdin,
// wait, SIGTERM, wait, SIGKILL), signalling its whole process group, and
// returns once the group has ended (or, for processes that ignore
// SIGKILL's effects, such as unreaped zombies, after a bounded wait).
func (p *stdioProc) Close() error {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		if !waitFor(p.exited, stopGrace) {
			signalGroup(p.cmd, sigTerm)
			if !waitFor(p.exited, stopGrace) {
				signalGroup(p.cmd, sigKill)
				waitFor(p.exited, stopGrace)
			}
		}
		waitFor(p.ended, 3*stopGrace)
		p.stdout.Close()
	})
	return nil
}

// waitFor waits up to d for ch to close and reports whether it did.
func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// stdioReader reads the server's stdout; closing it does nothing (the
// writer's Close stops the server and closes stdout).
type stdioReader struct{ p *stdioProc }

func (r stdioReader) Read(b []byte) (int, error) {
	n, err := r.p.stdout.Read(b)
	if err != nil {
		r.p.eofMu.Do(func() { close(r.p.eof) })
	}
	return n, err
}

func (stdioReader) Close() error { return nil }
