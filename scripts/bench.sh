#!/usr/bin/env bash
# Runs the benchmarks behind BENCHMARKS.md.
#
#   bash scripts/bench.sh [regexp]   every package's benchmarks, -count 6 (report the median);
#                                    output also in /tmp/toolgate-bench.txt
#   bash scripts/bench.sh scale      issue 14: PostgreSQL against SQLite, and one against two
#                                    gateway replicas, each pair measured alternately in one run
#                                    (output also in /tmp/toolgate-bench-scale.txt)
#
# scale needs PostgreSQL and Redis (TOOLGATE_TEST_POSTGRES, TOOLGATE_TEST_REDIS; the defaults are
# the local test services) and takes about 6 minutes. SCALE_RUNS (default 5) sets the store
# benchmark repetitions, SCALE_LOAD_RUNS (default 3) the load tool's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [[ "${1:-}" != scale ]]; then
  pattern="${1:-.}"
  go test -run='^$' -bench="$pattern" -benchmem -count=6 -timeout 30m \
    ./internal/canonjson/ ./audit/ ./policy/ ./ratelimit/ ./receipt/ ./catalog/ . | tee /tmp/toolgate-bench.txt
  exit 0
fi

pg="${TOOLGATE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
rd="${TOOLGATE_TEST_REDIS:-redis://127.0.0.1:6379}"
runs="${SCALE_RUNS:-5}"
out=/tmp/toolgate-bench-scale.txt
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
: >"$out"
log() { echo "$*" | tee -a "$out"; }

# 1. Store benchmarks: each run measures SQLite, then PostgreSQL, in the same minute.
go test -c -o "$tmp/postgres.test" ./store/postgres/
log "## store benchmarks: $runs runs, each sqlite then postgres ($(nproc) CPUs, $(go version | cut -d' ' -f3))"
for i in $(seq 1 "$runs"); do
  before="$(cut -d' ' -f1 /proc/loadavg)"
  (cd store/postgres && TOOLGATE_TEST_POSTGRES="$pg" "$tmp/postgres.test" -test.run='^$' \
    -test.bench='^(BenchmarkAppendEvents64|BenchmarkCallDurable64)$' -test.benchtime=2s -test.count=1) \
    | grep '^Benchmark' | sed "s/\$/ $before load/" | tee -a "$out" "$tmp/store.txt"
done
# Medians of every metric per benchmark, and the range of the 1-minute load average.
log ""
log "medians over $runs runs (load average at the start of each run: min–max):"
awk '
  { name = $1; for (i = 3; i < NF; i += 2) { k = name SUBSEP $(i+1); n[k]++; v[k, n[k]] = $i; if (!(k in seen)) { seen[k] = 1; order[++m] = k } } }
  function median(k,   j, l, t, c, a) {
    c = n[k]; for (j = 1; j <= c; j++) a[j] = v[k, j] + 0
    for (j = 2; j <= c; j++) { t = a[j]; for (l = j - 1; l >= 1 && a[l] > t; l--) a[l+1] = a[l]; a[l+1] = t }
    return c % 2 ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2
  }
  function lo(k,   j, r) { r = v[k, 1] + 0; for (j = 2; j <= n[k]; j++) if (v[k, j] + 0 < r) r = v[k, j] + 0; return r }
  function hi(k,   j, r) { r = v[k, 1] + 0; for (j = 2; j <= n[k]; j++) if (v[k, j] + 0 > r) r = v[k, j] + 0; return r }
  END {
    for (o = 1; o <= m; o++) {
      split(order[o], p, SUBSEP)
      if (p[2] == "ns/op" || p[2] == "B/op" || p[2] == "allocs/op") continue
      if (p[2] == "load") continue
      printf "%-36s %-12s median %10.6g   (range %g–%g; load %g–%g)\n", p[1], p[2], median(order[o]), lo(order[o]), hi(order[o]), lo(p[1] SUBSEP "load"), hi(p[1] SUBSEP "load")
    }
  }' "$tmp/store.txt" | tee -a "$out"

# 2. Gateway calls/s: toolgate serve on SQLite, on PostgreSQL, and two replicas on one PostgreSQL,
#    rate limits in Redis, steps alternating between the targets.
log ""
log "## gateway: toolgate-load, sqlite ×1, postgres ×1, postgres ×2"
go run ./cmd/toolgate-load --stores sqlite,postgres --replicas 1,2 --postgres "$pg" --redis "$rd" \
  --no-direct --concurrency 16,64 --runs "${SCALE_LOAD_RUNS:-3}" --duration 8s --warmup 2s | tee -a "$out"
