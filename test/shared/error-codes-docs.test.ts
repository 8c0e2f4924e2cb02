/**
 * The error registry and its documentation are one list: every code in shared/src/errors.ts has
 * its row in docs/errors.md with the same status and retry behaviour, no row names a code that
 * does not exist, and no code named anywhere in the README or docs is unknown (a renamed or
 * removed code would otherwise live on in the docs).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ERROR_CODES, isTransient, capstanError, type ErrorCode } from '@capstan/shared';
import { ROOT } from '../helpers/programs.js';

const docs = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8');
const rows = new Map<string, { status: number; retried: boolean }>();
for (const m of docs.matchAll(/^\| `(ERR_[A-Z0-9_]+)` \| (\d{3}) \| (yes|no) \| .+ \|$/gm)) {
  t.notOk(rows.has(m[1]!), `${m[1]} has one row`);
  rows.set(m[1]!, { status: Number(m[2]), retried: m[3] === 'yes' });
}

t.test('every registered code has its row, with its status and retry behaviour', async (t) => {
  for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
    const row = rows.get(code);
    if (!t.ok(row, `${code} is documented in docs/errors.md`)) continue;
    const err = capstanError(code, 'x');
    t.equal(row!.status, err.statusCode, `${code}: status`);
    t.equal(row!.retried, isTransient(err), `${code}: retried`);
  }
});

t.test('no documented code is unknown', async (t) => {
  for (const code of rows.keys()) t.ok(Object.hasOwn(ERROR_CODES, code), `${code} (docs/errors.md) exists`);
  const files = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  for (const f of files) {
    const text = readFileSync(join(ROOT, f), 'utf8');
    for (const m of text.matchAll(/\bERR_[A-Z0-9_]*[A-Z0-9]\b/g)) t.ok(Object.hasOwn(ERROR_CODES, m[0]), `${m[0]} named in ${f} exists`);
  }
});
