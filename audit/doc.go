// Package audit records what happened to every tool call, without leaking
// what the call carried.
//
// It defines the OpenWOP run events toolgate emits (agent.toolCalled,
// agent.toolReturned, tool.session.opened/closed) and their logs, the
// argsHash that identifies a call's arguments without revealing them
// (ArgsHash: lowercase hex SHA-256 of the RFC 8785 canonical JSON of the
// redacted arguments, CONTRACT.md §2.3), and the Redactor that scrubs
// secrets from arguments, results, error messages and log lines before they
// are hashed or written (SR-1 registered secrets become
// "[REDACTED:<secretId>]"; key-name and shape rules give "[redacted]";
// DESIGN.md decision 9).
package audit
