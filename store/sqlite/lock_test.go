package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// lockChildEnv names the database a lock child opens (see TestMain).
const lockChildEnv = "TOOLGATE_SQLITE_LOCK_CHILD_DB"

// TestMain runs a lock child when $TOOLGATE_SQLITE_LOCK_CHILD_DB is set and
// the tests otherwise.
func TestMain(m *testing.M) {
	if path := os.Getenv(lockChildEnv); path != "" {
		if err := runLockChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "lock child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runLockChild opens the store at path with Exclusive, prints "ready",
// holds it until its stdin is closed, then closes it and prints "closed".
func runLockChild(path string) error {
	s, err := Open(context.Background(), path, Options{Signer: signerN(1), Exclusive: true})
	if err != nil {
		return err
	}
	if err := s.AppendEvents(context.Background(), lockChildEvent()); err != nil {
		return err
	}
	fmt.Println("ready")
	io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	if err := s.Close(); err != nil {
		return err
	}
	fmt.Println("closed")
	return nil
}

// lockChildEvent is the event a lock child appends: proof that it owned
// the store.
func lockChildEvent() *audit.Event {
	ev, err := audit.NewEvent("run_child", audit.TypeToolCalled, json.RawMessage(`{}`), "", time.Now())
	if err != nil {
		panic(err)
	}
	ev.Tenant = "acme"
	return ev
}
