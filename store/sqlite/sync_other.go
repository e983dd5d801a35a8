//go:build !linux

package sqlite

import "os"

// fdatasync is fsync on systems without fdatasync(2) in package syscall.
func fdatasync(f *os.File) error { return f.Sync() }
