// Package ratelimit implements toolgate's per-tool rate limit: a token bucket
// keyed on (principal, toolId), as OpenWOP RFC 0064 §D requires when a host
// advertises toolHooks.perToolRateLimit.
//
// # Model
//
// A bucket holds at most Limit.Burst tokens and refills continuously at
// Limit.Rate tokens per second. A new bucket starts full. Each call takes one
// token; a call that finds less than one token is refused, nothing is
// consumed, and Result.RetryAfter says when one token will be available. The
// caller then does not invoke the tool, emits
// agent.toolReturned{status:"rate_limited"} (no durationMs) and surfaces
// rate_limited (HTTP 429, Retry-After header from Result.RetryAfterSeconds,
// details from Result.Details; CONTRACT §1.6).
//
// Buckets are keyed on Key{Tenant, Principal, ToolID}. The limiter does not
// special-case empty fields: a Key with an empty Principal is one more bucket,
// shared by every call that carries no principal. Whether such calls are
// limited together, refused, or given a synthetic principal (core.system) is
// the pipeline's explicit decision, never a silent bypass here.
//
// # Backends
//
// Limiter is the interface the pipeline consumes. Memory is the in-process
// backend for a single node (DESIGN decision 10): sharded, bounded in memory
// (MemoryOptions.MaxKeys), driven by an injected clock.
//
// A Redis backend (package ratelimit/redis, not part of this package) will
// satisfy the same interface for many replicas using GCRA, the generic cell
// rate algorithm, which admits exactly the same call sequences as this token
// bucket. Its state per key is one timestamp, the theoretical arrival time
// TAT: the instant the bucket would be full again. With emission interval
// T = 1/Rate, a take at time t is allowed iff TAT - t <= (Burst-1)·T, and then
// TAT becomes max(TAT, t) + T; remaining tokens are Burst - ceil((TAT-t)/T) and
// RetryAfter is TAT - t - (Burst-1)·T. One EVALSHA per Take runs this in Lua,
// atomically on the server, reading the server's own clock (TIME) so replica
// clock skew does not matter, and sets PEXPIRE to TAT - t so that a refilled
// bucket disappears on its own (the same "a full bucket is no bucket" rule
// Memory uses for eviction). Rate and Burst travel as script arguments on
// every call, so a policy reload applies from the next take, as in Memory.
// When Redis cannot answer (connection refused, timeout, script error) Take
// returns an error; the pipeline then denies the call (DESIGN decision 1)
// unless ratelimit.on_unavailable in the configuration selects a fallback
// (for example a per-replica Memory limiter).
//
// ParseRate converts the configuration syntax ("10/s", "100/m") to tokens per
// second.
package ratelimit
