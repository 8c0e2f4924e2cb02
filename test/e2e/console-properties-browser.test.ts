/**
 * Techniques and properties edited in the console, in a real browser against the real programs:
 * a global property made with the keyboard alone; a group's property and a secret one set in the
 * group's form, the effective values with their origin on the node page, the secret never shown
 * (not in any page, not in any API answer) yet kept when the group is saved again; the node's own
 * properties edited, a refused value shown under its input, a secret of its own set and never shown;
 * a group's edit proposed for review from its form and deployed, its secret kept; a technique made in its form (two
 * calls, the second only when the first repaired, a refused result condition shown under its
 * input), a directive from it, and the agent applying it; a viewer gets no edit control and the
 * API refuses its write.
 */
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import type { Page } from 'playwright-core';
import { chromiumAbsent, openBrowsers, shot } from '../helpers/browser.js';
import { adminClient, BIN, programDir, runProgram, serverAndRelay, waitFor } from '../helpers/programs.js';

const skip = chromiumAbsent();
if (skip) t.comment(`browser tests skipped: ${skip}`);

const SECRET = 'hunter2-do-not-show';
const NODE_SECRET = 'node-hunter3-do-not-show';

async function signIn(page: Page, url: string, token: string, hash = '#/'): Promise<void> {
  await page.goto(`${url}/${hash}`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('header .who').waitFor();
}

/** The id of the element that has the focus. */
const focused = (page: Page) => page.evaluate<string>('document.activeElement ? document.activeElement.id || document.activeElement.textContent || "" : ""');

/** Tab once; the id (or text) of what has the focus then. */
async function tab(page: Page): Promise<string> {
  await page.keyboard.press('Tab');
  return focused(page);
}

/** Everything the page holds as text, inputs' values included. */
const pageText = (page: Page) => page.evaluate<string>('document.body.innerText + [...document.querySelectorAll("input, textarea")].map((e) => e.value).join("\\n")');

t.test('techniques and properties are edited in the console; secrets are never shown', { skip }, async (t) => {
  const dir = programDir(t);
  // The files the agent manages live under `root`, laid out as on a host (root/etc/app/…).
  const root = join(dir, 'root');
  await mkdir(join(root, 'etc', 'app'), { recursive: true });
  await mkdir(join(root, 'run'), { recursive: true });
  const conf = join(root, 'etc', 'app', 'app.conf');
  const marker = join(root, 'run', 'app.reloaded');
  // One Chromium, a context (a sign-in of its own) for each user, launched while the programs start.
  const browsing = openBrowsers(t, ['console-properties', 'console-properties-viewer']);
  browsing.catch(() => undefined); // awaited below
  const { server, relay, token, api } = await serverAndRelay(t, dir);
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);
  const [admin, viewer] = await browsing;
  const { page, problems } = admin;
  // The admin signs in while the agent registers.
  const signedIn = signIn(page, server.url, token);
  signedIn.catch(() => undefined); // awaited below
  t.equal((await agent()).code, 5, 'the agent waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => (await api('GET', `/api/1/nodes/${id}`)).json?.data, 'the node registered');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const vera = (await api('POST', '/api/1/admins', { name: 'vera', role: 'viewer' })).json.data.token as string;
  const bob = adminClient(server.url, (await api('POST', '/api/1/admins', { name: 'bob', role: 'admin' })).json.data.token as string);
  t.equal((await api('POST', '/api/1/groups', { id: 'web', name: 'Web servers', nodes: [id] })).status, 201);

  await signedIn;

  // A global property with the keyboard alone: name, secret box, value, Save, in that order.
  await page.goto(`${server.url}/#/properties/new/edit`);
  await page.getByLabel('Name', { exact: true }).focus();
  await page.keyboard.type('site');
  t.equal(await tab(page), 'f-secret', 'Tab: the secret box');
  t.equal(await tab(page), 'f-value', 'Tab: the value');
  await page.keyboard.type('{"dc": "global", "ntp": pool}');
  await tab(page);
  t.equal(await focused(page), 'Save', 'Tab: Save');
  await page.keyboard.press('Enter');
  await page.locator('#f-value-error').getByText('must be JSON').waitFor();
  // The form moves the focus a turn after it shows the error: waited for, within the bound.
  await page.waitForFunction('document.activeElement !== null && document.activeElement.id === "f-value"', null, { timeout: 5_000 }).catch(() => undefined);
  t.equal(await focused(page), 'f-value', 'the refused value has the focus');
  await page.keyboard.press('End');
  for (let i = 0; i < 'pool}'.length; i++) await page.keyboard.press('Backspace');
  await page.keyboard.type('"pool.ntp.org"}');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Enter');
  await page.locator('#global-properties').getByText('"ntp":"pool.ntp.org"').waitFor();
  t.same((await api('GET', '/api/1/properties/site')).json.data.value, { dc: 'global', ntp: 'pool.ntp.org' });
  // The API's own refusal of a field lands under it.
  await page.goto(`${server.url}/#/properties/new/edit`);
  await page.getByLabel('Name', { exact: true }).fill('no.dots');
  await page.getByLabel('Value').fill('1');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#f-id-error').getByText(/property name/).waitFor();

  // The group's form: a property over the global one, and a secret. The members' preview lands
  // above the properties while they are edited: it moves nothing under the pointer (a click
  // whose button moved between press and release is lost). Held until the form is measured.
  let release = () => {};
  const held = new Promise<void>((resolve) => { release = resolve; });
  const PREVIEW = '**/api/1/policy/group-preview?*';
  await page.route(PREVIEW, async (route) => { await held; await route.continue(); });
  await page.goto(`${server.url}/#/groups/web/edit`);
  const addProperty = page.getByRole('button', { name: 'Add a property' });
  await addProperty.waitFor();
  const before = await addProperty.boundingBox();
  release();
  await page.getByTestId('preview-count').waitFor();
  t.same(await addProperty.boundingBox(), before, 'the preview landing moves nothing below it');
  await page.unroute(PREVIEW);
  await addProperty.click();
  await page.getByLabel('Property name').fill('site');
  await page.getByLabel('Value of site').fill('{"dc": "par1"}');
  await page.getByRole('button', { name: 'Add a property' }).click();
  await page.getByLabel('Property name').nth(1).fill('db_pw');
  await page.getByLabel('Secret db_pw').check();
  await page.getByLabel('Value of db_pw').fill(SECRET);
  t.equal(await page.getByLabel('Value of db_pw').getAttribute('type'), 'password', 'a secret is typed in a password field');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Group Web servers' }).waitFor();
  const groupRows = page.locator('#group-properties tbody tr');
  await groupRows.filter({ hasText: 'db_pw' }).getByText('secret').waitFor();
  t.match(await groupRows.filter({ hasText: 'site' }).innerText(), /"dc":"par1","ntp":"pool\.ntp\.org"[\s\S]*this group, merged over global/, 'the group page: its value over the global one');
  t.notMatch(await pageText(page), SECRET, 'the group page never shows the secret');

  // The node page: each effective leaf with its origin and what it overrode.
  await page.goto(`${server.url}/#/nodes/${id}`);
  const leaf = (path: string) => page.locator('#effective-properties tbody tr').filter({ has: page.locator('th', { hasText: new RegExp(`^${path.replace('.', '\\.')}$`) }) });
  await leaf('site.dc').waitFor();
  t.match(await leaf('site.dc').innerText(), /"par1"\s+group web\s+global: "global"/, 'site.dc from the group, over the global value');
  t.match(await leaf('site.ntp').innerText(), /"pool\.ntp\.org"\s+global/, 'site.ntp from the global level');
  t.match(await leaf('db_pw').innerText(), /secret\s+group web/, 'the secret: where it comes from, never its value');
  // Its sections load each on their own: the page settles (every read answered) before it is
  // searched for the secret, and before a button under the sections above it is clicked.
  await page.waitForLoadState('networkidle');
  t.notMatch(await pageText(page), SECRET, 'the node page never shows the secret');

  // The node's own properties: a refused name under its input, then a value of its own.
  await page.getByRole('button', { name: "Edit this node's properties" }).click();
  await page.getByRole('button', { name: 'Add a property' }).click();
  await page.getByLabel('Property name').fill('db_pw');
  await page.getByLabel('Value of db_pw').fill('"x"');
  await page.getByRole('button', { name: 'Save properties' }).click();
  await page.getByRole('alert').getByText('db_pw is secret at another level: set it there').waitFor();
  await page.getByLabel('Property name').fill('role');
  await page.getByLabel('Value of role').fill('"frontend"');
  await page.getByRole('button', { name: 'Save properties' }).click();
  await leaf('role').waitFor();
  t.match(await leaf('role').innerText(), /"frontend"\s+this node/);
  await shot(page, 'console-node-properties.png', root, '#properties');
  t.same((await api('GET', `/api/1/nodes/${id}/properties`)).json.data, { role: 'frontend' });
  // A secret of the node's own, from the same form: shown as set, with its origin, never its value.
  await page.getByRole('button', { name: "Edit this node's properties" }).click();
  await page.getByRole('button', { name: 'Add a property' }).click();
  await page.getByLabel('Property name').last().fill('node_pw');
  await page.getByLabel('Secret node_pw').check();
  await page.getByLabel('Value of node_pw').fill(NODE_SECRET);
  await page.getByRole('button', { name: 'Save properties' }).click();
  await leaf('node_pw').waitFor();
  t.match(await leaf('node_pw').innerText(), /secret\s+this node/);
  t.notMatch(await pageText(page), NODE_SECRET, 'the node page never shows the node\'s secret');
  t.same((await api('GET', `/api/1/nodes/${id}/properties/own`)).json.data.properties, { node_pw: { secret: true }, role: { value: 'frontend' } });

  // Saved again from its form, the group keeps its secret (the agent's file below shows it).
  await page.goto(`${server.url}/#/groups/web/edit`);
  await page.getByRole('button', { name: 'Set new value' }).waitFor();
  t.notMatch(await pageText(page), SECRET, 'the group form never holds the secret');
  // The form settles (every read it makes answered) before it is edited, as a user would see it.
  await page.waitForLoadState('networkidle');
  await page.getByLabel('Priority of its properties').fill('3');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Group Web servers' }).waitFor();
  t.equal((await api('GET', '/api/1/groups/web')).json.data.priority, 3);
  // Proposed for review from the same form: the change request carries the kept secret, never shows it.
  // The group page settles (its reads answered) before its Edit link is followed, as a user would.
  await page.waitForLoadState('networkidle');
  await page.getByRole('link', { name: 'Edit', exact: true }).click();
  await page.getByLabel('Priority of its properties').fill('4');
  await page.getByRole('button', { name: 'Propose for review' }).click();
  await page.getByRole('heading', { name: /Edit group web/ }).waitFor();
  t.notMatch(await pageText(page), SECRET, 'the change request page never shows the secret');
  const cr = page.url().split('/change-requests/')[1]!;
  t.equal((await bob('POST', `/api/1/change-requests/${cr}/approve`, { comment: 'fine' })).status, 200);
  t.equal((await bob('POST', `/api/1/change-requests/${cr}/deploy`, {})).status, 200);
  t.equal((await api('GET', '/api/1/groups/web')).json.data.priority, 4, 'deployed as reviewed');
  for (const path of ['/api/1/groups/web', '/api/1/groups', `/api/1/nodes/${id}/properties/effective`, `/api/1/nodes/${id}/properties/own`, '/api/1/audit?per_page=100', `/api/1/change-requests/${cr}`]) {
    t.notMatch(JSON.stringify((await api('GET', path)).json), SECRET, `${path} never returns the secret`);
    t.notMatch(JSON.stringify((await api('GET', path)).json), NODE_SECRET, `${path} never returns the node's secret`);
  }

  // A technique from its form: a parameter, two calls, the second only when the first repaired.
  await page.goto(`${server.url}/#/techniques/new/edit`);
  await page.getByLabel('Id', { exact: true }).focus();
  await page.keyboard.type('app_conf');
  t.equal(await tab(page), 'f-name', 'Tab: the name');
  await page.keyboard.type('App configuration');
  t.equal(await tab(page), 'f-version', 'Tab: the version');
  t.equal(await tab(page), 'f-description', 'Tab: the description');
  t.equal(await tab(page), 'Add a parameter', 'Tab: add a parameter');
  await page.keyboard.press('Enter');
  await page.locator('#f-parameters-0--name').fill('path');
  await page.locator('#f-parameters-0--required').check();
  for (let i = 0; i < 2; i++) await page.getByRole('button', { name: 'Add a call' }).click();
  await page.locator('#f-calls-0--id').focus();
  t.equal(await tab(page), 'f-calls-0--method', 'Tab: from the call id to its method');
  await page.locator('#f-calls-0--method').selectOption('file_content');
  await page.locator('#f-calls-0--params-path').fill('{{params.path}}');
  await page.locator('#f-calls-0--params-content').fill('password={{node.properties.db_pw}}\nrole={{node.properties.role}}\n');
  await page.locator('#f-calls-0--id').fill('conf');
  await page.locator('#f-calls-0--name').fill('Configuration');
  await page.locator('#f-calls-1--id').fill('reload');
  await page.locator('#f-calls-1--name').fill('Reload');
  await page.locator('#f-calls-1--method').selectOption('file_content');
  await page.locator('#f-calls-1--params-path').fill(marker);
  await page.locator('#f-calls-1--params-content').fill('reloaded\n');
  await page.getByLabel('Result condition').nth(1).fill("repaired('nope')");
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#f-calls-1--if-error').getByText(/nope, which is not an earlier call/).waitFor();
  t.equal(await focused(page), 'f-calls-1--if', 'the refused result condition has the focus');
  await page.locator('#f-calls-1--if').fill("repaired('conf')");
  await shot(page, 'console-technique-edit.png', root);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Technique App configuration' }).waitFor();
  t.match((await api('GET', '/api/1/techniques/app_conf')).json.data, {
    version: '1.0', parameters: [{ name: 'path', type: 'string', required: true }],
    calls: [{ id: 'conf', method: 'file_content' }, { id: 'reload', method: 'file_content', if: "repaired('conf')" }],
  });

  // A directive from it, its values from the technique's parameters; a rule; the agent applies it.
  await page.getByRole('link', { name: 'New directive from it' }).click();
  await page.getByLabel('Id', { exact: true }).fill('app');
  t.equal(await page.locator('#f-technique-id').inputValue(), 'app_conf', 'the technique chosen');
  await page.locator('#f-params-path').fill(conf);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Directive app' }).waitFor();
  t.match((await api('GET', '/api/1/directives/app')).json.data, { method: 'technique', technique: { id: 'app_conf', version: '1.0' }, params: { path: conf } });
  t.equal((await api('POST', '/api/1/rules', { id: 'apps', name: 'Apps', directives: ['app'], groups: ['web'] })).status, 201);

  // A viewer: no edit control on the new pages, and the API refuses its write. Checked in the
  // viewer's own context while the agent runs (a run changes nothing a viewer may do).
  const viewerChecks = (async () => {
    await signIn(viewer.page, server.url, vera, '#/properties');
    for (const route of ['#/properties', '#/techniques', '#/techniques/app_conf', '#/groups/web', `#/nodes/${id}`, '#/techniques/app_conf/edit', '#/properties/site/edit']) {
      await viewer.page.goto(`${server.url}/${route}`);
      await viewer.page.locator('main h1').first().waitFor();
      await viewer.page.waitForLoadState('networkidle');
      t.equal(await viewer.page.getByRole('link', { name: /^(Edit|New (property|technique|directive from it))$/ }).count(), 0, `${route}: no edit link`);
      t.equal(await viewer.page.getByRole('button', { name: /^(Save|Edit this node's properties|Set new value|Add a (call|property|parameter))/ }).count(), 0, `${route}: no edit button`);
    }
    const refused = await viewer.page.evaluate(async () => {
      const me = (await (await fetch('/console/sign-in')).json()) as { data: { csrf_token: string } };
      const r = await fetch('/api/1/properties/site', { method: 'PUT', headers: { 'content-type': 'application/json', 'x-csrf-token': me.data.csrf_token }, body: JSON.stringify({ value: 1 }) });
      return { status: r.status, code: ((await r.json()) as { error?: { code?: string } }).error?.code };
    });
    t.same(refused, { status: 403, code: 'ERR_FORBIDDEN' }, 'the API refuses the viewer\'s write');
  })();
  viewerChecks.catch(() => undefined); // awaited below
  const first = await agent();
  t.equal(first.code, 0, first.stderr);
  t.equal(await readFile(conf, 'utf8'), `password=${SECRET}\nrole=frontend\n`, 'the secret kept through the group\'s second save and a change request, and the node\'s own value');
  t.equal(await readFile(marker, 'utf8'), 'reloaded\n', 'the first call repaired: the second ran');
  await rm(marker);
  const second = await agent();
  t.equal(second.code, 0, second.stderr);
  await t.rejects(readFile(marker), { code: 'ENOENT' }, 'the first call was already right: the second did not run');

  // The new pages at a phone's width: nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  for (const route of ['#/properties', '#/properties/site/edit', '#/groups/web', '#/groups/web/edit', '#/techniques/app_conf/edit', '#/directives/app/edit', `#/nodes/${id}`]) {
    await page.goto(`${server.url}/${route}`);
    await page.locator('main h1').first().waitFor();
    await page.waitForLoadState('networkidle');
    const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
    t.ok(overflow <= 1, `${route} fits a phone's width (${overflow} px too wide)`);
  }
  await viewerChecks;
  t.same([...problems, ...viewer.problems], [], 'no Content-Security-Policy violation, no page error');
});
