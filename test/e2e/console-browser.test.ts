/**
 * The web console in a real browser (headless Chromium) against the real programs: sign in with
 * the admin token, see the pending node a real agent registered and accept it, run the agent,
 * and see the node's compliance and the change with its diff appear; a write without the CSRF
 * token is refused; no Content-Security-Policy violation; keyboard and phone width. A viewer
 * sees no accept or refuse button. (The screenshots in docs/img/ come from
 * console-policy-browser.test.ts.)
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import type { Principal } from '@capstan/server/console/principal';
import { ConsoleSignIns, ensureConsoleSecret } from '@capstan/server/console/signin';
import { CONSOLE_DIR, loadAssets } from '@capstan/server/console/static';
import { openRegistry } from '@capstan/server/registry/open';
import { chromiumAbsent, openBrowser } from '../helpers/browser.js';
import { BIN, runProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';
import { inventory } from '../server/store-suite.js';
import { composeDomain } from '@capstan/server/domain';

const skip = chromiumAbsent();
if (skip) t.comment(`browser tests skipped: ${skip}`);

t.test('an admin signs in, accepts a pending node, and sees its compliance and its change with the diff', { skip }, async (t) => {
  const dir = programDir(t);
  const { server, relay, token, api } = await serverAndRelay(t, dir);
  const target = join(dir, 'app.conf');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'the agent waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  const node = await waitFor(async () => (await api('GET', `/api/1/nodes/${id}`)).json?.data, 'the node registered');

  const { page, problems } = await openBrowser(t, 'console-admin');
  await page.goto(`${server.url}/`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Dashboard' }).waitFor();
  await page.getByTestId('pending-count').filter({ hasText: /^1$/ }).waitFor();

  // Pending: the node the agent registered, with its fingerprint; accept it.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Pending' }).click();
  const row = page.locator(`tr[data-node="${id}"]`);
  await row.getByText(node.certificate_fingerprint).waitFor();
  await row.getByRole('button', { name: `Accept ${node.hostname}` }).click();
  await page.getByRole('status').getByText('1 node accepted.').waitFor();
  t.equal((await api('GET', `/api/1/nodes/${id}`)).json.data.accepted, 'accepted', 'the click reached the API');

  // A policy, a first run (the file is made: intentional), drift, a second run (corrective).
  t.equal((await api('POST', '/api/1/directives', { id: 'app', name: 'App config', method: 'file_content', params: { path: target, content: 'listen 80\nworkers 4\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'all', name: 'All', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['app'], groups: ['all'] })).status, 201);
  const first = await agent();
  t.equal(first.code, 0, first.stderr);
  await writeFile(target, 'listen 8080\nworkers 4\n');
  const second = await agent();
  t.equal(second.code, 0, second.stderr);
  await waitFor(async () => ((await api('GET', `/api/1/changes?node=${id}`)).json.total >= 2 ? true : undefined), 'both changes stored');

  // The node page: compliance by rule, directive and component, and the corrective change's diff.
  await page.goto(`${server.url}/#/nodes/${id}`);
  const compliance = page.locator('#compliance');
  await compliance.locator('.big .pct').filter({ hasText: '100%' }).waitFor();
  await compliance.getByText('base', { exact: true }).waitFor();
  const component = compliance.locator('table.components tr', { hasText: 'File content' });
  await component.getByText('repaired').waitFor();
  const changes = page.locator('#changes li', { hasText: 'corrective' });
  await changes.locator('.diff .dd').filter({ hasText: '-listen 8080' }).waitFor();
  await changes.locator('.diff .da').filter({ hasText: '+listen 80' }).waitFor();
  await page.locator('#changes li', { hasText: 'intentional' }).first().waitFor();
  t.ok(await page.locator('time[title$=" UTC"]').count() > 0, 'times in the browser zone, UTC on hover');

  // A write with the cookie but without the CSRF token is refused; the node stays accepted.
  const forged = await page.evaluate(async (nodeId) => {
    const r = await fetch(`/api/1/nodes/${nodeId}/refuse`, { method: 'POST' });
    return { status: r.status, code: ((await r.json()) as { error?: { code?: string } }).error?.code };
  }, id);
  t.same(forged, { status: 403, code: 'ERR_CSRF' });
  t.equal((await api('GET', `/api/1/nodes/${id}`)).json.data.accepted, 'accepted');

  // The node list: the filter is in the URL, the filter bar shows it, columns sort.
  await page.goto(`${server.url}/#/nodes?status=reachable&accepted=accepted`);
  await page.locator('table.list').getByRole('link', { name: node.hostname }).waitFor();
  t.equal(await page.getByLabel('Status').inputValue(), 'reachable', 'the filter bar reads the URL');
  await page.getByRole('link', { name: 'Last run' }).click();
  await page.waitForURL(/sort=last_run_at/);
  // The page is drawn again for the new address (its filter bar too) before the filter is changed.
  await page.locator('th[aria-sort="ascending"]', { hasText: 'Last run' }).waitFor();
  await page.getByLabel('Status').selectOption('unreachable');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.getByText('No node matches.').waitFor();
  t.match(page.url(), /status=unreachable/);

  // The dashboard with data, at 1280 px; then phone width, and the keyboard.
  await page.goto(`${server.url}/#/`);
  // The figures seen at sign-in may be served again for a minute: ask for fresh ones.
  await page.getByRole('button', { name: 'Refresh figures' }).click();
  await page.locator('#global .big .pct').filter({ hasText: '100%' }).waitFor();
  await page.locator('#worst-rules').getByRole('link', { name: 'base' }).waitFor();
  await page.locator('#graphs .chart canvas').first().waitFor();
  await page.setViewportSize({ width: 390, height: 844 });
  for (const route of ['#/', `#/nodes/${id}`, '#/nodes']) {
    await page.goto(`${server.url}/${route}`);
    await page.locator('main h1').first().waitFor();
    await page.waitForLoadState('networkidle');
    const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
    t.ok(overflow <= 1, `${route} fits a phone's width (${overflow} px too wide)`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto('about:blank');
  await page.goto(`${server.url}/#/`);
  await page.locator('main h1').waitFor();
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate<string>('document.activeElement && document.activeElement.textContent'), 'Skip to content', 'the first Tab reaches the skip link');
  await page.keyboard.press('Enter');
  t.equal(await page.evaluate<string>('document.activeElement && document.activeElement.id'), 'main', 'which moves the focus to the content');

  // A move lands the focus on the new page's content in the same commit as the page, so a field
  // given the focus as soon as it shows keeps it. It was moved after the next frame: a field
  // focused and typed into meanwhile (a fast hand, a script, a loaded machine drawing late) lost
  // the focus to the page. Here the field is focused the moment it is in the document.
  const active = () => page.evaluate<string>('document.activeElement ? document.activeElement.id : ""');
  await page.goto(`${server.url}/#/groups`);
  await page.locator('main h1').first().waitFor();
  t.equal(await active(), 'main', 'a move lands on the new page');
  const focusedAtOnce = await page.evaluate<string>(`new Promise((resolve) => {
    const seen = new MutationObserver(() => {
      const field = document.getElementById('f-id');
      if (!field) return;
      seen.disconnect();
      field.focus();
      // Read after the next frame and the task it queues, where effects run after the paint.
      requestAnimationFrame(() => setTimeout(() => resolve(document.activeElement ? document.activeElement.id : '')));
    });
    seen.observe(document.body, { childList: true, subtree: true });
    location.hash = '#/groups/new/edit';
  })`);
  t.equal(focusedAtOnce, 'f-id', 'a field focused as soon as it shows keeps the focus');
  await page.keyboard.type('web');
  await page.keyboard.press('Tab');
  t.same([await page.getByLabel('Id', { exact: true }).inputValue(), await active()], ['web', 'f-name'], 'typed into it, then Tab to the next field');

  // Sign out: the sign-in form again, and the API no longer answers this browser.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByText('Signed out.').waitFor();
  t.equal(await page.evaluate(async () => (await fetch('/api/1/nodes')).status), 401);
  t.same(problems, [], 'no Content-Security-Policy violation, no page error');
});

t.test('a viewer sees pending nodes without accept or refuse buttons', { skip }, async (t) => {
  // A viewer token, resolved by an injected resolver: the console shows what the role allows.
  // The next test has a real viewer (made through the admins API) refused by the API itself.
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  await store.upsertFromInventory(inventory('pending-1', { hostname: 'web-new' }));
  const VIEWER = 'viewer-token-'.padEnd(40, 'v');
  const resolveToken = async (tok: string): Promise<Principal | null> => (tok === VIEWER ? { name: 'vera', role: 'viewer' } : null);
  const signIns = new ConsoleSignIns({ secret: await ensureConsoleSecret(join(dir, 'console.secret')), ttlMs: 600_000, secure: false });
  const app = buildApp({
    config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: 'admin-token-'.padEnd(40, 'a'), status: async () => ({}), resolveToken,
    console: { signIns, assets: await loadAssets(CONSOLE_DIR), history: null },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    await store.close();
  });
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  const { page, problems } = await openBrowser(t, 'console-viewer');
  await page.goto(`${url}/#/pending`);
  await page.getByLabel('Admin token').fill(VIEWER);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('header .who').getByText('viewer').waitFor();
  await page.locator('tr[data-node="pending-1"]').getByText('web-new').waitFor();
  t.equal(await page.getByRole('button', { name: /Accept|Refuse/ }).count(), 0, 'no accept or refuse button');
  t.equal(await page.locator('input[type=checkbox]').count(), 0, 'nothing to select');
  t.same(problems, []);
});

// A real viewer (made through the admins API) signed in to the console: the API itself refuses
// its accept, even with the CSRF token, and the refusal is in the audit log.
t.test('the API refuses a viewer\'s accept made through the console', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  await store.upsertFromInventory(inventory('pending-2'));
  const ADMIN = 'admin-token-'.padEnd(40, 'a');
  const signIns = new ConsoleSignIns({ secret: await ensureConsoleSecret(join(dir, 'console.secret')), ttlMs: 600_000, secure: false });
  // The server's own token resolver: the bootstrap admin and the named admins in the store.
  const app = buildApp({ config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: ADMIN, status: async () => ({}), console: { signIns, assets: new Map(), history: null } });
  t.teardown(() => app.close());
  const made = await app.inject({ method: 'POST', url: '/api/1/admins', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, payload: JSON.stringify({ name: 'vera', role: 'viewer' }) });
  t.equal(made.statusCode, 201, made.body);
  const signIn = await app.inject({ method: 'POST', url: '/console/sign-in', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ token: made.json().data.token }) });
  t.equal(signIn.statusCode, 201, signIn.body);
  const cookie = String(signIn.headers['set-cookie']).split(';')[0]!;
  const who = await app.inject({ method: 'GET', url: '/console/sign-in', headers: { cookie } });
  t.match(who.json().data, { name: 'vera', role: 'viewer' }, 'the sign-in has the token\'s role');
  const res = await app.inject({ method: 'POST', url: '/api/1/nodes/pending-2/accept', headers: { cookie, 'x-csrf-token': signIn.json().data.csrf_token } });
  t.equal(res.statusCode, 403, res.body);
  t.equal(res.json().error?.code, 'ERR_FORBIDDEN');
  t.equal((await store.getNode('pending-2'))!.accepted, 'pending', 'still pending');
  const audit = await app.inject({ method: 'GET', url: '/api/1/audit?admin=vera', headers: { authorization: `Bearer ${ADMIN}` } });
  t.match(audit.json().data, [{ admin: 'vera', role: 'viewer', action: 'node.accept', target: 'pending-2', status: 403, error: 'ERR_FORBIDDEN' }], 'the refusal is audited');
});
