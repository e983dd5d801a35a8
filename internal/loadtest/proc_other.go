//go:build !linux

package loadtest

import (
	"errors"
	"os/exec"
	"time"
)

func setPdeathsig(*exec.Cmd) {}

// procCPU needs /proc: gateway CPU is reported only on Linux.
func procCPU(int) (time.Duration, error) {
	return 0, errors.New("gateway CPU is measured from /proc (Linux only)")
}

func selfCPU() time.Duration { return 0 }

// procRSS needs /proc: RSS is measured only on Linux.
func procRSS(int) (int64, error) {
	return 0, errors.New("RSS is measured from /proc (Linux only)")
}
