/**
 * Working in the console, in a real browser against the real programs: an admin builds a group
 * (its members previewed while typing, a bad filter shown with its position), a directive (a
 * form made from its method's parameters, a refused parameter shown under its input) with the
 * keyboard alone, and proposes a rule; a second admin approves and deploys it in their own
 * sign-in; the agent's next run shows the change with its diff; from the dashboard's worst rule
 * to the failing node to the failing component's message; a change request whose directive
 * changed meanwhile is refused on deploy; a viewer sees no edit control and the API refuses its
 * write. The screenshots in docs/img/ come from here (CAPSTAN_UPDATE_SCREENSHOTS=1), with the
 * test's root directory taken off the page's text, so paths read as on a real host.
 */
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import type { Page } from 'playwright-core';
import { chromiumAbsent, openBrowsers, shot } from '../helpers/browser.js';
import { BIN, programDir, runProgram, serverAndRelay, waitFor } from '../helpers/programs.js';

const skip = chromiumAbsent();
if (skip) t.comment(`browser tests skipped: ${skip}`);

async function signIn(page: Page, url: string, token: string, hash = '#/'): Promise<void> {
  await page.goto(`${url}/${hash}`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('header .who').waitFor();
}

/** Press Tab until the focused element's label says `label` (at most 40 times); its id. */
async function tabTo(page: Page, label: RegExp): Promise<string> {
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press('Tab');
    const text = await page.evaluate<string>(`(() => { const el = document.activeElement; const l = el && el.id ? document.querySelector('label[for="' + el.id + '"]') : null; return (l ? l.textContent : el ? el.textContent : '') || ''; })()`);
    if (label.test(text)) return focused(page);
  }
  throw new Error(`no element labelled ${label} within 40 Tabs`);
}

/** The id of the element that has the focus. */
const focused = (page: Page) => page.evaluate<string>('document.activeElement ? document.activeElement.id || document.activeElement.textContent || "" : ""');

t.test('admins build, review and deploy policy in the console; the agent applies it; drill-downs reach the failing component', { skip }, async (t) => {
  const dir = programDir(t);
  // The files the agent manages live under `root`, laid out as on a host (root/etc/app/…).
  const root = join(dir, 'root');
  await mkdir(join(root, 'etc', 'app'), { recursive: true });
  const target = join(root, 'etc', 'app', 'app.conf');
  const stateDir = join(root, 'var', 'lib', 'capstan', 'agent');
  // One Chromium, a context (a sign-in of its own) for each user, launched while the programs start.
  const browsing = openBrowsers(t, ['console-policy-admin', 'console-policy-reviewer', 'console-policy-viewer']);
  browsing.catch(() => undefined); // awaited below
  const { server, relay, token, api } = await serverAndRelay(t, dir);
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'error']);
  const [admin, second, viewer] = await browsing;
  const { page, problems } = admin;
  // The admin signs in while the agent registers.
  const signedIn = signIn(page, server.url, token);
  signedIn.catch(() => undefined); // awaited below
  t.equal((await agent()).code, 5, 'the agent waits for acceptance');
  const id = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  const node = await waitFor(async () => (await api('GET', `/api/1/nodes/${id}`)).json?.data, 'the node registered');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const tokens: Record<string, string> = {};
  for (const [name, role] of [['bob', 'admin'], ['vera', 'viewer']] as const) tokens[name] = (await api('POST', '/api/1/admins', { name, role })).json.data.token;
  // A check that fails on every node, under a rule of its own: the dashboard's worst rule.
  t.equal((await api('POST', '/api/1/directives', { id: 'false-check', name: 'Always fails', method: 'command_check', params: { command: '/bin/false' } })).status, 201);

  await signedIn;

  // A group, with the keyboard alone: each Tab reaches the next labelled field, in order.
  await page.goto(`${server.url}/#/groups/new/edit`);
  await page.getByLabel('Id', { exact: true }).focus();
  await page.keyboard.type('web');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'f-name', 'Tab: the name');
  await page.keyboard.type('Web servers');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'f-filter', 'Tab: the filter');
  await page.keyboard.type('hostname = (');
  await page.locator('#filter-error').getByText('ERR_FILTER_SYNTAX').waitFor();
  t.ok(await page.locator('#filter-error pre.caret').count(), 'the refused expression is shown with a mark at its position');
  for (let i = 0; i < 'hostname = ('.length; i++) await page.keyboard.press('Backspace');
  await page.keyboard.type(`hostname = ${node.hostname} or hostname = db-*`);
  await page.getByTestId('preview-count').filter({ hasText: /^1 accepted node$/ }).waitFor();
  await page.locator('.preview').getByText(node.hostname).waitFor();
  await shot(page, 'console-group-edit.png', root);
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'f-nodes', 'Tab: the static members');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'Add a property', 'Tab: its properties');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'f-priority', 'Tab: their priority');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'Save', 'Tab: Save');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Group Web servers' }).waitFor();
  t.match((await api('GET', '/api/1/groups/web')).json.data, { id: 'web', filter: [{ key: 'q' }] });

  // A directive from its method's parameters; a refused parameter is shown under its input.
  await page.goto(`${server.url}/#/directives/new/edit`);
  await page.getByLabel('Id', { exact: true }).fill('app-conf');
  await page.getByLabel('Name').fill('App config');
  await page.getByLabel('Method').selectOption('file_content');
  await page.locator('#f-params-path').fill('etc/app/app.conf');
  await page.locator('#f-params-content').fill('listen 80\nworkers 4\n');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#f-params-path-error').getByText('absolute path').waitFor();
  t.equal(await focused(page), 'f-params-path', 'the focus is on the refused parameter');
  await page.locator('#f-params-path').fill(target);
  await shot(page, 'console-directive-edit.png', root);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Directive App config' }).waitFor();
  await page.locator('#params').getByText(target).waitFor();
  t.equal((await api('POST', '/api/1/rules', { id: 'checks', name: 'Checks', directives: ['false-check'], groups: ['web'] })).status, 201);

  // A rule, with the keyboard alone too: its choices are labelled checkboxes Tab reaches in order.
  await page.goto(`${server.url}/#/rules/new/edit`);
  await page.getByLabel('Id', { exact: true }).focus();
  await page.keyboard.type('web-base');
  await page.keyboard.press('Tab');
  t.equal(await focused(page), 'f-name', 'Tab: the rule\'s name');
  await page.keyboard.type('Web base');
  await tabTo(page, /^App config \(app-conf\)/);
  await page.keyboard.press('Space');
  await tabTo(page, /^Web servers \(web\)/);
  await page.keyboard.press('Space');
  t.ok(await page.getByLabel('App config (app-conf)').isChecked() && await page.getByLabel('Web servers (web)').isChecked(), 'checked from the keyboard');
  await tabTo(page, /^Propose for review$/);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: /Create rule web-base/ }).waitFor();
  const crUrl = page.url();
  await page.locator('#impact').getByText(node.hostname).waitFor();
  t.equal(await page.getByRole('button', { name: 'Approve' }).count(), 0, 'its author gets no approve button');
  t.equal((await api('GET', '/api/1/rules/web-base')).status, 404, 'nothing deployed yet');

  // The second admin approves and deploys it in their own sign-in.
  await signIn(second.page, server.url, tokens.bob!, crUrl.slice(crUrl.indexOf('#')));
  await second.page.locator('#impact').getByRole('button', { name: node.hostname }).click();
  await second.page.locator('#impact .diff .da').filter({ hasText: '"id": "app-conf"' }).waitFor();
  await second.page.getByLabel('Comment').fill('fine for the web servers');
  await shot(second.page, 'console-change-request.png', root);
  await second.page.getByRole('button', { name: 'Approve' }).click();
  await second.page.locator('h1 .badge').getByText('approved').waitFor();
  await second.page.getByRole('button', { name: 'Deploy' }).click();
  await second.page.locator('h1 .badge').getByText('deployed').waitFor();
  t.match((await api('GET', '/api/1/rules/web-base')).json.data, { directives: ['app-conf'], groups: ['web'] });

  // A viewer: no edit control anywhere, and the API refuses its write. Checked in the viewer's
  // own context while the admins go on (nothing below changes what a viewer may do).
  const viewerChecks = (async () => {
    await signIn(viewer.page, server.url, tokens.vera!, '#/directives');
    await viewer.page.getByRole('link', { name: 'App config' }).waitFor();
    for (const route of ['#/directives', '#/directives/app-conf', '#/rules', '#/rules/web-base', '#/groups', '#/groups/web', `#/nodes/${id}`]) {
      await viewer.page.goto(`${server.url}/${route}`);
      await viewer.page.locator('main h1').first().waitFor();
      await viewer.page.waitForLoadState('networkidle');
      t.equal(await viewer.page.getByRole('link', { name: /^(Edit|New (rule|directive|group))$/ }).count(), 0, `${route}: no edit control`);
      t.equal(await viewer.page.getByRole('button', { name: /^(Run now|Save|Approve|Deploy)$/ }).count(), 0, `${route}: no write button`);
    }
    const refused = await viewer.page.evaluate(async () => {
      const me = (await (await fetch('/console/sign-in')).json()) as { data: { csrf_token: string } };
      const r = await fetch('/api/1/directives/app-conf', {
        method: 'PUT', headers: { 'content-type': 'application/json', 'x-csrf-token': me.data.csrf_token },
        body: JSON.stringify({ id: 'app-conf', method: 'file_content', params: { path: '/etc/x', content: '' } }),
      });
      return { status: r.status, code: ((await r.json()) as { error?: { code?: string } }).error?.code };
    });
    t.same(refused, { status: 403, code: 'ERR_FORBIDDEN' }, 'the API refuses the viewer\'s write');
  })();
  viewerChecks.catch(() => undefined); // awaited below

  // The agent's next run applies it: the node page shows the change with its diff.
  const ran = await agent();
  t.equal(ran.code, 0, ran.stderr);
  t.equal(await readFile(target, 'utf8'), 'listen 80\nworkers 4\n');
  await waitFor(async () => ((await api('GET', `/api/1/changes?node=${id}`)).json.total >= 1 ? true : undefined), 'the change stored');
  await page.goto(`${server.url}/#/nodes/${id}`);
  await page.locator('#changes li', { hasText: 'intentional' }).locator('.diff .da').filter({ hasText: '+listen 80' }).waitFor();
  await page.locator('#rules').getByRole('link', { name: 'Web base' }).waitFor();

  // From the dashboard's worst rule to the failing node to the failing component's message.
  await page.goto(`${server.url}/#/`);
  await page.getByRole('button', { name: 'Refresh figures' }).click();
  await page.locator('#worst-rules').getByRole('link', { name: 'checks' }).first().click();
  await page.getByRole('heading', { name: /Rule Checks/ }).waitFor();
  await page.locator('#nodes').getByRole('link', { name: node.hostname }).click();
  const failing = page.locator('li.focus table.components tr', { hasText: 'Command check' });
  await failing.getByText('non compliant').waitFor();
  await failing.getByText('exit 1, expected 0').waitFor();
  await shot(page, 'console-node.png', root);
  await page.goto(`${server.url}/#/rules/checks`);
  await page.getByRole('button', { name: 'Refresh figures' }).click();
  await page.locator('#directives .pct').filter({ hasText: '0%' }).waitFor();
  await page.locator('#nodes').getByRole('link', { name: node.hostname }).waitFor();
  await shot(page, 'console-rule.png', root);
  await page.goto(`${server.url}/#/`);
  await page.getByRole('button', { name: 'Refresh figures' }).click();
  await page.locator('#graphs .chart canvas').first().waitFor();
  await shot(page, 'console-dashboard.png', root);

  // A change request whose directive changed meanwhile is refused on deploy.
  await page.goto(`${server.url}/#/directives/app-conf/edit`);
  await page.locator('#f-params-content').fill('listen 8080\n');
  await page.getByRole('button', { name: 'Propose for review' }).click();
  await page.getByRole('heading', { name: /Edit directive app-conf/ }).waitFor();
  const staleUrl = page.url();
  t.equal((await api('PUT', '/api/1/directives/app-conf', { id: 'app-conf', name: 'App config', method: 'file_content', params: { path: target, content: 'listen 81\n' } })).status, 200);
  await second.page.goto(staleUrl);
  await second.page.getByRole('alert').getByText(/Changed since it was proposed: directive app-conf/).waitFor();
  await second.page.getByRole('button', { name: 'Approve' }).click();
  await second.page.getByRole('button', { name: 'Deploy' }).click();
  await second.page.getByRole('alert').getByText(/ERR_CHANGE_STALE/).waitFor();
  t.equal((await api('GET', '/api/1/directives/app-conf')).json.data.params.content, 'listen 81\n', 'the newer version stays');

  // The new pages at a phone's width: nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  for (const route of ['#/rules/checks', '#/directives/app-conf', '#/groups/new/edit', '#/directives/app-conf/edit', crUrl.slice(crUrl.indexOf('#')), '#/changes', '#/audit', '#/nodes?sort=compliance']) {
    await page.goto(`${server.url}/${route}`);
    await page.locator('main h1').first().waitFor();
    await page.waitForLoadState('networkidle');
    const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
    t.ok(overflow <= 1, `${route} fits a phone's width (${overflow} px too wide)`);
  }
  await viewerChecks;
  t.same([...problems, ...second.problems, ...viewer.problems], [], 'no Content-Security-Policy violation, no page error');
});
