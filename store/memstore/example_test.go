package memstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/store/memstore"
)

func Example() {
	ctx := context.Background()
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tool := range []string{"native:clock", "native:text.echo"} {
		ev, err := audit.NewEvent("run_1", audit.TypeToolCalled, json.RawMessage(`{"toolId":"`+tool+`"}`), "", at)
		if err != nil {
			panic(err)
		}
		ev.Tenant = "acme"
		if err := s.AppendEvents(ctx, ev); err != nil {
			panic(err)
		}
	}
	events, err := s.EventsByRun(ctx, "acme", "run_1", -1, 10)
	if err != nil {
		panic(err)
	}
	for _, ev := range events {
		fmt.Println(ev.Sequence, ev.Type, string(ev.Payload))
	}
	// Another tenant sees nothing of acme's run.
	other, _ := s.EventsByRun(ctx, "globex", "run_1", -1, 10)
	fmt.Println(len(other))
	// Output:
	// 0 agent.toolCalled {"toolId":"native:clock"}
	// 1 agent.toolCalled {"toolId":"native:text.echo"}
	// 0
}
