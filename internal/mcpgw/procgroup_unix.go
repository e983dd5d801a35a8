//go:build unix

package mcpgw

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// setProcessGroup makes cmd start in a new process group whose id is its
// pid, so that its helpers can be signalled with it.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// signalGroup sends sig to cmd's process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// groupAlive reports whether a process of cmd's group still exists.
func groupAlive(cmd *exec.Cmd) bool {
	if cmd.Process == nil {
		return false
	}
	return !errors.Is(syscall.Kill(-cmd.Process.Pid, 0), syscall.ESRCH)
}

// endGroup ends what is left of the process group of cmd, whose leader
// has exited: SIGTERM, then SIGKILL after grace; it returns once the group
// is gone or, at the latest, grace after the SIGKILL.
func endGroup(cmd *exec.Cmd, grace time.Duration) {
	if !groupAlive(cmd) {
		return
	}
	signalGroup(cmd, syscall.SIGTERM)
	if waitGroup(cmd, grace) {
		return
	}
	signalGroup(cmd, syscall.SIGKILL)
	waitGroup(cmd, grace)
}

// waitGroup polls until cmd's process group is gone or d has passed, and
// reports whether it is gone.
func waitGroup(cmd *exec.Cmd, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if !groupAlive(cmd) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}
