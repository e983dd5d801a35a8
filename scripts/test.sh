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

step "go build (static, -trimpath: the flags scripts/release.sh uses, so TestReleaseScript finds them built)"
CGO_ENABLED=0 go build -trimpath -o /dev/null ./cmd/toolgate

step "npm test dependencies (testdata/npm: MCP reference servers, Node 22)"
bash scripts/npm-setup.sh

step "headless Chromium for the web console's browser tests (Debian chromium, chromium-driver; installed when missing)"
if [ ! -x /usr/bin/chromium ] || ! command -v chromedriver >/dev/null; then
  command -v apt-get >/dev/null || { echo "test.sh: /usr/bin/chromium is missing and apt-get is not available to install it" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || { echo "test.sh: apt-get update failed; cannot install chromium" >&2; exit 1; }
  apt-get install -y -qq chromium chromium-driver >/tmp/toolgate-apt-chromium.log 2>&1 || {
    cat /tmp/toolgate-apt-chromium.log; echo "test.sh: apt-get install chromium chromium-driver failed" >&2; exit 1; }
fi
[ -x /usr/bin/chromium ] || { echo "test.sh: /usr/bin/chromium is still missing after apt-get" >&2; exit 1; }
dpkg-query -W chromium chromium-driver 2>/dev/null || true

step "services: PostgreSQL 127.0.0.1:5432 and Redis 127.0.0.1:6379 (started when down; the tests fail, never skip, without them)"
# reachable HOST PORT: a TCP connection succeeds.
reachable() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
# wait_for NAME HOST PORT: poll for up to 30 s, then fail the run.
wait_for() {
  for _ in $(seq 1 150); do
    reachable "$2" "$3" && { echo "$1 is up at $2:$3"; return 0; }
    sleep 0.2
  done
  echo "test.sh: $1 is not reachable at $2:$3 and could not be started" >&2
  exit 1
}
if [ -z "${TOOLGATE_TEST_POSTGRES:-}" ] && ! reachable 127.0.0.1 5432; then
  echo "starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
[ -n "${TOOLGATE_TEST_POSTGRES:-}" ] || wait_for PostgreSQL 127.0.0.1 5432
if ! reachable 127.0.0.1 6379; then
  echo "starting Redis"
  if command -v redis-server >/dev/null; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
  fi
fi
wait_for Redis 127.0.0.1 6379

step "go test -race (unit, integration, fuzz seed corpora)"
go test -race -count=1 -timeout 20m ./...

step "benchmark smoke (each benchmark once; figures in BENCHMARKS.md come from scripts/bench.sh)"
go test -run='^$' -bench=. -benchtime=1x -count=1 -timeout 10m ./... >/tmp/toolgate-bench-smoke.log 2>&1 || { cat /tmp/toolgate-bench-smoke.log; exit 1; }
grep -c '^Benchmark' /tmp/toolgate-bench-smoke.log | sed 's/^/benchmarks run: /'

step "all checks passed"
