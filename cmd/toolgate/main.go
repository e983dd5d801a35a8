// Command toolgate is the toolgate gateway and its operator tools; see
// `toolgate --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
