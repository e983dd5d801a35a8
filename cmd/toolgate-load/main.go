// Command toolgate-load measures tools/call throughput, latency and gateway
// CPU, direct to a Go SDK echo server versus through toolgate serve with the
// full gate on; see `toolgate-load -h` and BENCHMARKS.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/loadtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := loadtest.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
