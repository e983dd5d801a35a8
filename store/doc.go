// Package store declares where toolgate keeps its records: run events,
// hash-chained receipts, approvals and tool sessions. It holds the small
// consumer-side interfaces (Events, Receipts, Approvals, Sessions, and Store,
// their composite), the record types of approvals and sessions with their
// state machines, adapters that let the pipeline write through a store
// (EventLog, ReceiptLog), and the building blocks every backend shares:
// opaque cursors (Cursor), the follow-mode fan-out (Feed) and the receipt
// export (Export).
//
// Backends live in sub-packages: store/memstore (in memory, for tests and
// embedding) and store/sqlite (durable, embedded, group commit). Every
// backend passes the one conformance suite in store/storetest.
//
// # Quick start
//
//	s, err := sqlite.Open(ctx, "toolgate.db", sqlite.Options{Signer: signer})
//	if err != nil { ... }
//	defer s.Close()
//	gw, err := toolgate.New(toolgate.Options{
//		Events:   store.EventLog(s),   // audit.Log
//		Receipts: store.ReceiptLog(s), // the pipeline's receipt log
//	})
//
// # Errors
//
// Every error a store returns is an *errcode.Error, so callers test codes
// with errors.Is(err, &errcode.Error{Code: errcode.NotFound}):
//
//   - errcode.InvalidArgument: a malformed argument or record, a bad cursor;
//   - errcode.NotFound: an unknown (or other tenant's) receipt, approval or
//     session;
//   - errcode.Conflict: a duplicate id, an event id re-used with different
//     content, a state transition that is not allowed;
//   - errcode.Cancelled / errcode.Timeout: ctx ended before the operation
//     took effect (then nothing was written);
//   - errcode.AuditUnavailable: the store could not read or write (disk full,
//     read-only file, closed store); a write that fails so stored nothing.
//
// # Tenancy
//
// Every read of events, approvals, sessions and single receipts is scoped
// to one tenant: a tenant never sees, and cannot learn the existence of,
// another tenant's records (a foreign id answers NotFound, exactly like an
// unknown one). Whole receipt chains (ReceiptsByChain, Checkpoints,
// ExportReceipts) are not tenant-scoped: a chain is the gateway's, it is
// verifiable only as a whole, and reading it is an operator privilege.
package store
