//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sqlite

import "os"

// lockStore takes no lock on systems without flock(2): Options.Exclusive
// has no effect there (see the package doc, "Exclusive").
func lockStore(string) (*storeLock, error) { return nil, nil }

// storeLock is never held on these systems.
type storeLock struct{}

// Close does nothing.
func (*storeLock) Close() {}

// tryFlock reports false: without flock(2) a journal's single owner cannot
// be enforced, so these systems write without the journal.
func tryFlock(*os.File) (bool, error) { return false, nil }
