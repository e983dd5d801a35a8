//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sqlite

import "os"

// lockStore takes no lock on systems without flock(2): Options.Exclusive
// has no effect there (see the package doc, "Exclusive").
func lockStore(string) (*os.File, error) { return nil, nil }
