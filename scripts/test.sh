#!/usr/bin/env bash
# The whole test suite: formatting, vet, unit + integration tests with the race
# detector, fuzz seed corpora, and a one-iteration smoke run of every benchmark.
# CI runs exactly this (.ci/run). Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "test.sh: Go 1.26 is required (https://go.dev/dl)"; exit 1; }

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "go build"
go build -o /dev/null ./cmd/toolgate

step "npm test dependencies (testdata/npm: MCP reference servers, Node 22)"
bash scripts/npm-setup.sh

step "go test -race (unit, integration, fuzz seed corpora)"
go test -race -count=1 -timeout 20m ./...

step "benchmark smoke (each benchmark once; figures in BENCHMARKS.md come from scripts/bench.sh)"
go test -run='^$' -bench=. -benchtime=1x -count=1 -timeout 10m ./... >/tmp/toolgate-bench-smoke.log 2>&1 || { cat /tmp/toolgate-bench-smoke.log; exit 1; }
grep -c '^Benchmark' /tmp/toolgate-bench-smoke.log | sed 's/^/benchmarks run: /'

step "all checks passed"
