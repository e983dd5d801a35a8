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
// MultiLimiter adds TakeAll: one token from each of several buckets, all or
// none, for a call that several policy entries limit at once (per
// principal_tool, tenant_tool, tool and principal; Key.Rule keeps their
// buckets apart). TakeAll (the function) uses it, and takes a single bucket
// on any Limiter; several buckets on a plain Limiter fail with ErrNotAtomic.
// The package ratelimittest is the behaviour suite every backend passes.
//
// Package ratelimit/redis is the shared backend for many replicas: GCRA,
// the generic cell rate algorithm, which admits exactly the same call
// sequences as this token bucket, run by one Lua script per call over all
// of its buckets, on Redis's own clock (TIME). When Redis cannot answer,
// its Take returns an error wrapping ErrUnavailable and the pipeline refuses
// the call with ratelimit_unavailable (DESIGN decision 1), unless
// ratelimit.on_unavailable: allow lets it through.
//
// ParseRate converts the configuration syntax ("10/s", "100/m") to tokens per
// second.
package ratelimit
