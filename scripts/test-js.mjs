#!/usr/bin/env node
// Before `npm test`: removes the JavaScript that `tsc -p test` left beside a test source since
// deleted or renamed (test/**/*.js with no .ts of the same name), so tap never runs a test that no
// longer exists. tsc itself then writes the rest afresh.
import { readdirSync, rmSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('../test/', import.meta.url).pathname;
let removed = 0;
const walk = (dir) => {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== 'node_modules' && e.name !== 'fixtures') walk(p);
      continue;
    }
    const m = /^(.*)\.js(\.map)?$/.exec(e.name);
    if (m && !existsSync(join(dir, `${m[1]}.ts`))) {
      rmSync(p);
      removed++;
    }
  }
};
walk(root);
if (removed > 0) console.log(`test-js: removed ${removed} file(s) compiled from test sources that are gone`);
