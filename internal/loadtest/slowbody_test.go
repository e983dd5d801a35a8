package loadtest

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/cli"
)

// slowChildEnv makes the test binary run the toolgate command line with its
// arguments (`serve --config F`): the gateway child of RunSlowBody.
const slowChildEnv = "TOOLGATE_LOADTEST_CHILD"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "proxy" { // the bare proxy child (Options.Self)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if os.Getenv(slowChildEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// A short slow-body attack against a real serve process: every
// unauthenticated connection is answered 401 at once, no body byte is
// held, and the report has the RSS figures. No memory figure is asserted.
func TestSlowBodySmoke(t *testing.T) {
	t.Setenv(slowChildEnv, "1")
	rep, err := RunSlowBody(t.Context(), SlowOptions{Toolgate: os.Args[0], Conns: 5, Body: 1 << 20, Chunk: 4096,
		Every: 50 * time.Millisecond, Hold: 2 * time.Second, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Answered != 5 || !strings.HasPrefix(rep.FirstStatus, "HTTP/1.1 401") || rep.BaselineRSS <= 0 || rep.PeakRSS <= 0 {
		t.Fatalf("report %+v: want 5 connections answered 401 and RSS figures", rep)
	}
	var b strings.Builder
	rep.Markdown(&b)
	if !strings.Contains(b.String(), "| 5 | 1048576 B |") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestSlowBodyFlags(t *testing.T) {
	for _, args := range [][]string{{"slowbody", "--conns", "0"}, {"slowbody", "--conns", "5000"}, {"slowbody", "--hold", "1h"}, {"slowbody", "--nope"}} {
		var out, errb strings.Builder
		if code := Main(t.Context(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errb.String())
		}
	}
}

// toolgate-load sessions against a real serve child (this test binary, see
// TestMain): every session opens and calls, both RSS samples are read and
// the report has the table. No memory figure is asserted.
func TestSessionsSmoke(t *testing.T) {
	t.Setenv(slowChildEnv, "1")
	rep, err := RunSessions(t.Context(), SessionsOptions{Toolgate: os.Args[0], N: 40, Mode: "per_client", Settle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Opened != 40 || rep.BaselineRSS <= 0 || rep.IdleRSS <= 0 || rep.PeakRSS < rep.IdleRSS || rep.Protocol == "" {
		t.Fatalf("report %+v: want 40 sessions opened and RSS samples", rep)
	}
	var b strings.Builder
	rep.Markdown(&b)
	if !strings.Contains(b.String(), "| 40 | ") || !strings.Contains(b.String(), "idle RSS with 40 sessions: ") {
		t.Errorf("report:\n%s", b.String())
	}
	for _, args := range [][]string{{"sessions", "--n", "0"}, {"sessions", "--sessions", "pooled"}, {"sessions", "x"}} {
		var out, errb strings.Builder
		if code := Main(t.Context(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
