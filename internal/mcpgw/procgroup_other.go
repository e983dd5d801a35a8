//go:build !unix

package mcpgw

import (
	"os"
	"os/exec"
	"time"
)

var (
	sigTerm os.Signal = os.Kill // no SIGTERM: stop at once
	sigKill os.Signal = os.Kill
)

// setProcessGroup does nothing: without process groups only the server
// process itself is stopped.
func setProcessGroup(*exec.Cmd) {}

// signalGroup sends sig to cmd's process.
func signalGroup(cmd *exec.Cmd, sig os.Signal) {
	if cmd.Process != nil {
		cmd.Process.Signal(sig)
	}
}

// endGroup does nothing: the server process has exited.
func endGroup(*exec.Cmd, time.Duration) {}
