/**
 * Policy texts (migrations 41 and 42), on both stores through the store's own calls: every
 * bundle reads back byte for byte as it was written, whether nodes share its text, its config id
 * names another text, or it was written on its own. A text that two bundles of a write have is
 * stored once, one no other bundle has stays in its bundle, and a bundle whose text is another's
 * under the same config id is stored whole. On SQLite a text goes with the last bundle that uses
 * it (moved, deleted, or its node deleted); on PostgreSQL the sweep deletes a text no bundle uses
 * once nobody has taken it into use for two hours, and never one a bundle uses. A version 40 database gets its bundles split at the upgrade, where a text cuts
 * out of them exactly, and reads them back the same; a text only one bundle has stays in it.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { ExpectedComponent, Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { bundleJson } from '@capstan/server/policy/content';
import { inventory, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { pgUnavailable } from './pg.js';
import { sqliteAt } from '../helpers/old-schema.js';
import { programDir } from '../helpers/programs.js';

const NODES = ['n1', 'n2', 'n3', 'n4'];
const AT = '2024-05-01T09:00:00.000Z';
const LIST: ExpectedComponent[] = [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }];
/** A text as the generator writes it after `"directives":` (a directive, and properties). */
const text = (v: string) => `[{"rule_id":"r1","directive_id":"d1","method":"file_content","params":{"path":"/etc/motd","content":"${v}\\n"}}],"properties":{"owner":"ops"}`;

const write = (node: string, config: string, tail: string, at = AT) =>
  ({ bundle: { node_id: node, config_id: config, generated_at: at, bundle: bundleJson(node, config, at, tail) }, expected: LIST });

/** The stored texts, by config id. */
async function texts(db: Db): Promise<string[]> {
  return (await db.rows!('SELECT config_id FROM policy_texts ORDER BY config_id')).map((r) => r.config_id as string);
}

async function readsBack(t: Test, store: Store, node: string, config: string, tail: string, at = AT) {
  t.same(await store.getPolicyBundle(node), { node_id: node, config_id: config, generated_at: at, bundle: bundleJson(node, config, at, tail) }, `${node} reads back its bundle, byte for byte`);
}

function scenario(t: Test, backend: Backend): void {
  t.test('a text shared by the nodes that have it, read back byte for byte, gone with its last bundle', async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of NODES) await store.upsertFromInventory(inventory(id));
    const sqlite = db.dialect === 'sqlite';
    t.equal(await store.putPolicies([write('n1', 'c-a', text('a')), write('n2', 'c-a', text('a')), write('n3', 'c-b', text('b'))]), 3);
    await readsBack(t, store, 'n1', 'c-a', text('a'));
    await readsBack(t, store, 'n2', 'c-a', text('a'));
    await readsBack(t, store, 'n3', 'c-b', text('b'));
    const apart = async () => (await db.rows!("SELECT node_id FROM policy_bundles WHERE bundle = '' ORDER BY node_id")).map((r) => r.node_id as string);
    t.same(await texts(db), ['c-a'], 'a text two bundles have is stored once');
    t.same(await apart(), ['n1', 'n2'], 'their bundles do not hold it; a text no other has stays in its bundle');

    // Another text under a config id that names one already: stored whole, both read back.
    t.equal(await store.putPolicies([write('n4', 'c-a', text('not a'))]), 1);
    await readsBack(t, store, 'n4', 'c-a', text('not a'));
    await readsBack(t, store, 'n1', 'c-a', text('a'));
    t.same(await apart(), ['n1', 'n2'], 'n4 stored whole');

    // A text stays while a bundle uses it, and goes with the last one.
    t.equal(await store.putPolicies([write('n1', 'c-c', text('c'))]), 1);
    await readsBack(t, store, 'n1', 'c-c', text('c'));
    t.same(await texts(db), ['c-a'], 'c-a still used by n2; c-c, n1\'s alone, in its bundle');
    const later = '2024-05-01T09:05:00.000Z';
    t.equal(await store.putPolicies([write('n2', 'c-c', text('c'), later), write('n3', 'c-c', text('c'), later)]), 2);
    await readsBack(t, store, 'n2', 'c-c', text('c'), later);
    await readsBack(t, store, 'n3', 'c-c', text('c'), later);
    await readsBack(t, store, 'n1', 'c-c', text('c'));
    await readsBack(t, store, 'n4', 'c-a', text('not a'));
    if (sqlite) t.same(await texts(db), ['c-c'], 'c-a released once no bundle shares it (n4 holds its own whole)');
    else t.same(await texts(db), ['c-a', 'c-c'], 'c-a no bundle shares is left to the sweep');
    t.same(await apart(), ['n2', 'n3']);

    // A bundle written on its own shares a text that is stored.
    t.ok(await store.putPolicyBundle(write('n1', 'c-c', text('c')).bundle));
    await readsBack(t, store, 'n1', 'c-c', text('c'));
    // SQLite looks the stored text up; PostgreSQL keeps apart only what two bundles of a write share.
    t.same(await apart(), sqlite ? ['n1', 'n2', 'n3'] : ['n2', 'n3']);
    // Not in the generator's form: stored as it came, and the text it had released when no other has it.
    const odd = { node_id: 'n3', config_id: 'c-d', generated_at: AT, bundle: '{"directives":[]}' };
    t.ok(await store.putPolicyBundle(odd));
    t.same(await store.getPolicyBundle('n3'), odd);
    if (sqlite) t.same(await texts(db), ['c-c'], 'still used by n1 and n2');
    if (!sqlite) {
      t.equal(await store.deleteUnusedPolicyTexts(100), 0, 'texts taken into use within two hours are kept, used or not');
      await db.exec("UPDATE policy_texts SET used_at = now() - interval '3 hours'");
      t.equal(await store.deleteUnusedPolicyTexts(100), 1, 'the text no bundle uses, untouched for two hours, is deleted');
      t.same(await texts(db), ['c-c'], 'the text n2 and n3 use is kept, however old');
      await readsBack(t, store, 'n2', 'c-c', text('c'), later);
    }

    // Deleted, or its node deleted: the text goes with its last bundle.
    t.ok(await store.deletePolicyBundle('n1'));
    if (sqlite) t.same(await texts(db), ['c-c'], 'still used by n2');
    await readsBack(t, store, 'n2', 'c-c', text('c'), later);
    t.ok(await store.deleteNode('n2'));
    t.equal(await store.getPolicyBundle('n2'), null);
    if (sqlite) t.same(await texts(db), [], 'released when its last node went');
    else {
      t.equal(await store.deleteUnusedPolicyTexts(100), 1, 'deleted by the sweep once no bundle uses it (untouched for three hours)');
      t.same(await texts(db), []);
    }
    t.equal(await store.deleteUnusedPolicyTexts(100), 0, 'nothing left to sweep');
    await readsBack(t, store, 'n4', 'c-a', text('not a'));
  });
}

t.test('sqlite', async (t) => scenario(t, sqliteBackend));
t.test('postgres', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  scenario(t, postgresBackend('capstan_texts'));

  t.test('writes at once share texts, while the sweep runs, and every bundle reads back', async (t) => {
    const { db, store } = await setup(t, postgresBackend('capstan_texts_race'));
    const nodes = Array.from({ length: 48 }, (_, i) => `r${String(i).padStart(2, '0')}`);
    for (const id of nodes) await store.upsertFromInventory(inventory(id));
    // A stale text nobody uses, for the sweep to take while the writes run.
    await db.exec("INSERT INTO policy_texts (config_id, tail, used_at) VALUES ('c-stale', 'x', now() - interval '3 hours')");
    for (let round = 0; round < 3; round++) {
      const at = `2024-05-01T09:0${round}:00.000Z`;
      // Six writes of eight nodes, all at once; each write's nodes share one of three texts with the others'.
      const writes = Array.from({ length: 6 }, (_, w) => nodes.slice(w * 8, w * 8 + 8).map((id, k) => write(id, `c-${round}-${k % 3}`, text(`${round}/${k % 3}`), at)));
      const [swept, ...written] = await Promise.all([store.deleteUnusedPolicyTexts(100), ...writes.map((w) => store.putPolicies(w))]);
      t.same(written, writes.map((w) => w.length), `round ${round}: every write stored its bundles`);
      if (round === 0) t.equal(swept, 1, 'the stale text swept beside them');
      for (const w of writes) for (const it of w) t.same(await store.getPolicyBundle(it.bundle.node_id), it.bundle);
      t.same(await texts(db), [0, 1, 2].flatMap((k) => Array.from({ length: round + 1 }, (_, r) => `c-${r}-${k}`)).sort(), `round ${round}: each text once, the earlier ones left to the sweep`);
      t.equal((await db.rows!("SELECT count(*)::int AS n FROM policy_bundles WHERE bundle = ''"))[0]!.n, nodes.length, 'no bundle holds its text');
    }
    // Two bundles whose text is not the one stored under their config id: both stored whole.
    const odd = [write('r00', 'c-0-0', text('other')), write('r01', 'c-0-0', text('other'))];
    t.equal(await store.putPolicies(odd), 2);
    for (const it of odd) t.same(await store.getPolicyBundle(it.bundle.node_id), it.bundle, `${it.bundle.node_id}: its own text, not the stored one`);
    t.same((await db.rows!("SELECT node_id FROM policy_bundles WHERE bundle <> '' ORDER BY node_id")).map((r) => r.node_id), ['r00', 'r01']);
  });
});

t.test('SQLite: a version 40 database gets its bundles split where a text cuts out of them exactly', async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const db = sqliteAt(path, 40);
  const bundles: Array<[string, string, string]> = [
    ['n1', 'c-a', bundleJson('n1', 'c-a', AT, text('a'))],
    ['n2', 'c-a', bundleJson('n2', 'c-a', AT, text('a'))],
    ['n3', 'c-a', bundleJson('n3', 'c-a', AT, text('not a'))],
    ['n4', 'c-b', '{"directives":[],"node_id":"n4"}'],
    ['n5', 'c-e', bundleJson('n5', 'c-e', AT, text('e'))],
  ];
  for (const [id, config, bundle] of bundles) {
    db.prepare(`INSERT INTO nodes (id, hostname, status, state, accepted, created_at, updated_at, name, state_changed_at) VALUES (?, ?, 'reachable', 'running', 'accepted', ?, ?, ?, ?)`)
      .run(id, `${id}.example.com`, AT, AT, id, AT);
    db.prepare('INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle) VALUES (?, ?, ?, ?)').run(id, config, AT, bundle);
  }
  db.close();
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  for (const [id, config, bundle] of bundles) t.same(await store.getPolicyBundle(id), { node_id: id, config_id: config, generated_at: AT, bundle }, `${id} reads back the same bytes`);
  const Database = (await import('better-sqlite3')).default;
  const read = new Database(path, { readonly: true });
  t.same(read.prepare('SELECT config_id FROM policy_texts').pluck().all(), ['c-a'], 'one text, for the bundles it cuts out of (a text one bundle has stays in it)');
  t.same(read.prepare("SELECT node_id FROM policy_bundles WHERE bundle = '' ORDER BY node_id").pluck().all(), ['n1', 'n2'], 'the others stay whole');
  read.close();
  // Two bundles written with n5's text share it from now on; n5's, whole from before, reads the same.
  t.equal(await store.putPolicies([write('n1', 'c-e', text('e')), write('n2', 'c-e', text('e'))]), 2);
  for (const id of ['n1', 'n2']) await readsBack(t, store, id, 'c-e', text('e'));
  t.same(await store.getPolicyBundle('n5'), { node_id: 'n5', config_id: 'c-e', generated_at: AT, bundle: bundleJson('n5', 'c-e', AT, text('e')) });
});
