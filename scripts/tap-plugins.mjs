#!/usr/bin/env node
// Rebuilds tap's test class when the plugins it was built with are not the ones package.json
// asks for ("tap": { "plugin": [...] }).
//
// tap notices the difference itself, but only after its runner has loaded the old build: the
// first `npm test` after `npm ci` would then start every test file with the loaders of the
// default plugins (ts-node among them, on top of tsx: about a second more per file). Checking
// here, before tap starts, costs a fraction of a second when nothing needs building.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TapConfig } from '@tapjs/config';
import { signature } from '@tapjs/test';

const config = await TapConfig.load();
if (config.pluginSignature !== signature) {
  console.log('tap: rebuilding its test class for the plugins in package.json');
  const tap = fileURLToPath(new URL('../node_modules/.bin/tap', import.meta.url));
  const r = spawnSync(tap, ['build'], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}
