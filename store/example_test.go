package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// The pipeline writes events through store.EventLog, an audit.Log; a retry
// of an event already stored is idempotent.
func ExampleEventLog() {
	ctx := context.Background()
	s, _ := memstore.New(memstore.Options{})
	defer s.Close()
	var log audit.Log = store.EventLog(s)

	ev, _ := audit.NewEvent("run_1", audit.TypeToolCalled, json.RawMessage(`{}`), "", time.Now())
	fmt.Println(log.Append(ctx, ev), ev.Sequence)
	retry := *ev
	fmt.Println(log.Append(ctx, &retry), retry.Sequence)

	_, err := s.ReceiptByID(ctx, "", "rcpt_unknown")
	fmt.Println(errors.Is(err, &errcode.Error{Code: errcode.NotFound}))
	// Output:
	// <nil> 0
	// <nil> 0
	// true
}
