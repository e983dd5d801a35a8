#!/usr/bin/env bash
# Runs the benchmarks behind BENCHMARKS.md: each -count 6 (report the median).
# Usage: bash scripts/bench.sh [regexp]   (output also in /tmp/toolgate-bench.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
pattern="${1:-.}"
go test -run='^$' -bench="$pattern" -benchmem -count=6 -timeout 30m \
  ./internal/canonjson/ ./audit/ ./policy/ ./ratelimit/ ./receipt/ ./catalog/ . | tee /tmp/toolgate-bench.txt
