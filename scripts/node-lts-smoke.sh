#!/usr/bin/env bash
# The end-to-end smoke on another Node.js major (default 22): its binary is installed from the npm
# registry's `node` package into a temporary prefix (no download outside the registry), the tree
# is copied (tracked files) to a temporary directory with ../shared beside it, installed and built
# there with that Node (native addons compiled for its ABI), and the walking skeleton and the
# quick start run. Exit status: 0 when both pass.
set -uo pipefail
major=${1:-22}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
npm install --no-save --no-audit --no-fund --prefix "$work/node" "node@$major" >/dev/null || { echo "cannot install node@$major"; exit 1; }
export PATH="$work/node/node_modules/.bin:$PATH"
echo "== smoke on node $(node --version)"
mkdir -p "$work/tree"
(cd "$here" && git ls-files -z | xargs -0 cp --parents -t "$work/tree")
# The tests read ../shared (conformance fixtures) beside the tree.
[ -d "$here/../shared" ] && ln -s "$here/../shared" "$work/shared"
cd "$work/tree" || exit 1
JOBS=max npm ci --no-audit --no-fund >"$work/npm-ci.log" 2>&1 || { tail -n 40 "$work/npm-ci.log"; echo "npm ci failed on node $major"; exit 1; }
npm run build >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; echo "npm run build failed on node $major"; exit 1; }
node scripts/tap-plugins.mjs >/dev/null
npx tap test/e2e/walking-skeleton.test.ts test/e2e/quickstart.test.ts
