//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sqlite

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// Issue 12 point 6: the database, its -wal and its -shm hold every event,
// receipt and approval: Open creates them 0600 (like the signing key),
// whatever the process umask, and a reopen keeps them so.
func TestFilesArePrivate(t *testing.T) {
	for _, umask := range []int{0o022, 0o000, 0o277} {
		old := syscall.Umask(umask)
		path := tempDB(t)
		s, err := Open(context.Background(), path, Options{Signer: signerN(1), Exclusive: true})
		if err != nil {
			syscall.Umask(old)
			t.Fatal(err)
		}
		if err := s.AppendEvents(context.Background(), event(t, "acme", "run-1", 0, 0)); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			for _, name := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
				fi, err := os.Stat(name)
				if err != nil {
					t.Fatalf("umask %04o, %s: %v", umask, when, err)
				}
				if perm := fi.Mode().Perm(); perm != 0o600 {
					t.Errorf("umask %04o, %s: %s has mode %04o, want 0600", umask, when, name, perm)
				}
			}
		}
		check("after the first write")
		s.Close()
		s = openAt(t, path, Options{})
		if err := s.AppendEvents(context.Background(), event(t, "acme", "run-1", 1, 0)); err != nil {
			t.Fatal(err)
		}
		check("after a reopen")
		s.Close()
		syscall.Umask(old)
	}
}
