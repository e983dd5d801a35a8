package toolgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
)

// fullDisk is an event log whose writes fail, like a store on a full disk.
type fullDisk struct{}

func (fullDisk) Append(context.Context, ...*audit.Event) error {
	return errcode.Wrap(errcode.AuditUnavailable, errors.New("database or disk is full"), "committing audit batch")
}

type fullDiskReceipts struct{}

func (fullDiskReceipts) Append(context.Context, *receipt.Receipt) error {
	return errors.New("database or disk is full")
}

// Issue 3, acceptance 3: when the store cannot write, calls are refused with
// audit_unavailable and the tool is never invoked.
func TestUnwritableStoreRefusesCalls(t *testing.T) {
	gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(t, allowAllPolicy), Events: fullDisk{}, Receipts: fullDiskReceipts{}})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:rm.rf", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
		func(context.Context, json.RawMessage) (any, error) { ran++; return "gone", nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:rm.rf", Principal: alice})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != audit.StatusError || res.Err.Code != errcode.AuditUnavailable || res.Output != nil {
			t.Fatalf("result %+v", res)
		}
	}
	if ran != 0 {
		t.Fatalf("the tool ran %d times without a durable agent.toolCalled", ran)
	}
}
