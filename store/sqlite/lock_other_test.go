//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sqlite

import "testing"

// TestExclusiveNoLock: without flock(2), Exclusive takes no lock.
func TestExclusiveNoLock(t *testing.T) {
	path := tempDB(t)
	openAt(t, path, Options{Exclusive: true})
	openAt(t, path, Options{Exclusive: true})
}
