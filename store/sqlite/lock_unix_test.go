//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

// wantInUse fails unless err is AuditUnavailable naming pid with msg.
func wantInUse(t *testing.T, err error, path, msg string, pid int) {
	t.Helper()
	e := errcode.As(err)
	if e == nil || e.Code != errcode.AuditUnavailable {
		t.Fatalf("second Exclusive Open: got %v, want audit_unavailable", err)
	}
	want := fmt.Sprintf("store %s %s (pid %d)", path, msg, pid)
	if e.Message != want {
		t.Fatalf("second Exclusive Open: message %q, want %q", e.Message, want)
	}
	if e.Details["pid"] != pid || e.Details["lock"] != path+".lock" {
		t.Fatalf("second Exclusive Open: details %v", e.Details)
	}
}

// lockedPID returns the pid written in path's lock file.
func lockedPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("lock file holds %q: %v", b, err)
	}
	return pid
}

// TestExclusiveSameProcess: flock locks belong to the open file
// description, so a second Store of the same file in the same process is
// refused too; a non-exclusive Open is not; Close (and a failed Open)
// release the lock, and the lock file stays.
func TestExclusiveSameProcess(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	a, err := Open(ctx, path, Options{Signer: signerN(1), Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("lock file mode %v, want 0600", perm)
	}
	if pid := lockedPID(t, path); pid != os.Getpid() {
		t.Fatalf("lock file names pid %d, want %d", pid, os.Getpid())
	}
	_, err = Open(ctx, path, Options{Signer: signerN(1), Exclusive: true})
	wantInUse(t, err, path, "is already open in this process", os.Getpid())
	// An alias of the same file (a symbolic link) is the same store.
	alias := filepath.Join(t.TempDir(), "alias.db")
	if err := os.Symlink(path, alias); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, alias, Options{Signer: signerN(1), Exclusive: true}); err == nil {
		t.Fatal("a symbolic link to a locked store opened exclusively")
	}
	// So is a hard link, which has its own lock file but shares the inode;
	// the refusal happens before anything is written through the link.
	hard := filepath.Join(filepath.Dir(path), "hard.db")
	if err := os.Link(path, hard); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, hard, Options{Signer: signerN(1), Exclusive: true})
	if e := errcode.As(err); e == nil || e.Code != errcode.AuditUnavailable ||
		!strings.Contains(e.Message, "under another name for the same file") || e.Details["lock"] != hard {
		t.Fatalf("Exclusive Open through a hard link: %v", err)
	}
	if _, err := os.Stat(hard + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Open through a hard link left %s-wal: %v", hard, err)
	}
	// Without Exclusive nothing is checked (the CLI beside a gateway).
	reader := openAt(t, path, Options{Signer: signerN(1)})
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".lock"); err != nil {
		t.Fatalf("lock file after Close: %v", err)
	}
	b := openAt(t, path, Options{Signer: signerN(1), Exclusive: true})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// An Open that fails after taking the lock releases it.
	bad := tempDB(t)
	if err := os.WriteFile(bad, bytes.Repeat([]byte("not a database "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, bad, Options{Signer: signerN(1), Exclusive: true})
	wantCode(t, err, errcode.AuditUnavailable, "Open of a corrupt file")
	if strings.Contains(err.Error(), "in use") {
		t.Fatalf("Open of a corrupt file: %v", err)
	}
	f, err := lockStore(bad)
	if err != nil {
		t.Fatalf("lock after a failed Open: %v", err)
	}
	f.Close()

	// A lock file that cannot be created fails Open with AuditUnavailable.
	_, err = Open(ctx, tempDB(t)+"/missing/toolgate.db", Options{Signer: signerN(1), Exclusive: true})
	wantCode(t, err, errcode.AuditUnavailable, "Open in a missing directory")
}

// startLockChild starts a child process (this test binary) holding an
// Exclusive Store of path, and waits until it holds it.
func startLockChild(t *testing.T, path string) (cmd *exec.Cmd, release func() string) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("lock child did not get ready: %q %s", lines.Text(), stderr.String())
	}
	return cmd, func() string {
		stdin.Close()
		var rest []string
		for lines.Scan() {
			rest = append(rest, lines.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("lock child: %v: %s", err, stderr.String())
		}
		return strings.Join(rest, "\n")
	}
}

// TestExclusiveOtherProcess: while another process holds an Exclusive
// Store, Open with Exclusive fails with AuditUnavailable naming that
// process; once it closes the store, or dies by SIGKILL without closing
// it, Open succeeds.
func TestExclusiveOtherProcess(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)

	cmd, release := startLockChild(t, path)
	_, err := Open(ctx, path, Options{Signer: signerN(1), Exclusive: true})
	wantInUse(t, err, path, "is in use by another toolgate process", cmd.Process.Pid)
	if msg := errcode.As(err).Error(); !strings.Contains(msg, fmt.Sprintf("(pid %d)", cmd.Process.Pid)) {
		t.Fatalf("error %q does not name pid %d", msg, cmd.Process.Pid)
	}
	// A reader without Exclusive opens beside it.
	reader := openAt(t, path, Options{Signer: signerN(1)})
	evs, err := reader.EventsByRun(ctx, "acme", "run_child", -1, 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("reader beside the child: %d events, %v", len(evs), err)
	}
	reader.Close()
	if out := release(); out != "closed" {
		t.Fatalf("lock child said %q after release, want closed", out)
	}
	s := openAt(t, path, Options{Signer: signerN(1), Exclusive: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// kill -9: the kernel drops the lock; the stale pid in the lock file
	// blocks nothing.
	cmd, _ = startLockChild(t, path)
	_, err = Open(ctx, path, Options{Signer: signerN(1), Exclusive: true})
	wantInUse(t, err, path, "is in use by another toolgate process", cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) {
		t.Fatalf("killed child: %v", err)
	}
	if pid := lockedPID(t, path); pid != cmd.Process.Pid {
		t.Fatalf("lock file names pid %d, want the dead child's %d", pid, cmd.Process.Pid)
	}
	s = openAt(t, path, Options{Signer: signerN(1), Exclusive: true})
	evs, err = s.EventsByRun(ctx, "acme", "run_child", -1, 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("after the kill: %d events, %v", len(evs), err)
	}
	if pid := lockedPID(t, path); pid != os.Getpid() {
		t.Fatalf("lock file names pid %d, want %d", pid, os.Getpid())
	}
}
