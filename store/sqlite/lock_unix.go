//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// lockStore takes the lock of Options.Exclusive: an exclusive, non-blocking
// flock(2) on path + ".lock" (created 0600 if missing), then writes this
// process's id into it; then the same on the database file itself (created
// empty if missing, as SQLite would), which every name of the file shares:
// a hard link has its own lock file but not its own inode. The lock is
// held as long as the returned storeLock is open. flock locks belong to the open file description, so a second
// lockStore fails even in the same process; the kernel releases the lock
// when the descriptor is closed or the process ends. os.OpenFile opens
// close-on-exec, so child processes never inherit the lock.
//
// Errors: *errcode.Error AuditUnavailable if another holder has the lock
// (naming its pid when the lock file tells it) or the file cannot be
// opened or locked.
func lockStore(path string) (*storeLock, error) {
	name := realPath(path) + ".lock"
	f, err := openPrivate(name, os.O_RDWR)
	if err != nil {
		return nil, store.Unavailable("open store "+path+": lock file", err)
	}
	if err := flock(f); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, inUse(path, name, readPID(f))
		}
		return nil, store.Unavailable("open store "+path+": lock "+name, err)
	}
	// Best effort: the pid only feeds the message of the next lockStore.
	// It is written over the old content first and the rest cut after, so
	// that a reader never sees an empty file, at worst (for an instant) a
	// previous holder's pid.
	line := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if _, err := f.WriteAt(line, 0); err == nil {
		f.Truncate(int64(len(line)))
	}
	db, err := openPrivate(path, os.O_RDONLY)
	if err != nil {
		f.Close()
		return nil, store.Unavailable("open store "+path, err)
	}
	if err := flock(db); err != nil {
		db.Close()
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errcode.Errorf(errcode.AuditUnavailable,
				"store %s is in use by another toolgate process under another name for the same file (a hard link?)", path).
				WithDetails(map[string]any{"lock": path})
		}
		return nil, store.Unavailable("open store "+path+": lock", err)
	}
	return &storeLock{file: f, db: db}, nil
}

// storeLock is a held lock of Options.Exclusive: the lock file and the
// database file, each with an exclusive flock.
type storeLock struct{ file, db *os.File }

// Close releases both locks (closing the only descriptors releases the
// flocks). nil is a no-op.
func (l *storeLock) Close() {
	if l != nil {
		l.db.Close()
		l.file.Close()
	}
}

// flock takes an exclusive, non-blocking flock(2) on f, retrying EINTR.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// readPID returns the pid at the start of the lock file, 0 if there is
// none.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	buf = buf[:n]
	end := 0
	for end < len(buf) && buf[end] >= '0' && buf[end] <= '9' {
		end++
	}
	pid, err := strconv.Atoi(string(buf[:end]))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// inUse is the error of a lock held by someone else: pid (0: unknown).
func inUse(path, lockName string, pid int) *errcode.Error {
	var e *errcode.Error
	switch {
	case pid == 0:
		e = errcode.Errorf(errcode.AuditUnavailable, "store %s is in use by another toolgate process (pid unknown; lock %s)", path, lockName)
	case pid == os.Getpid():
		e = errcode.Errorf(errcode.AuditUnavailable, "store %s is already open in this process (pid %d)", path, pid)
	default:
		e = errcode.Errorf(errcode.AuditUnavailable, "store %s is in use by another toolgate process (pid %d)", path, pid)
	}
	details := map[string]any{"lock": lockName}
	if pid != 0 {
		details["pid"] = pid
	}
	return e.WithDetails(details)
}

// realPath resolves symbolic links in path (its directory when the file
// does not exist yet), so that every alias of one database file locks the
// same lock file. On error it returns path unchanged.
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path))
	}
	return path
}

// tryFlock takes an exclusive, non-blocking flock(2) on f: false (and no
// error) if another open file holds it.
func tryFlock(f *os.File) (bool, error) {
	err := flock(f)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
