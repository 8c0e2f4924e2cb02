/**
 * Techniques in the console, in a real browser against the real server: the list with each
 * technique's version, parameters, calls and the directives using it; a technique's page with
 * its parameters and its calls in order; a technique directive's page linking to it, and its form
 * made from the technique's parameters. (Their forms: console-properties-browser.test.ts.)
 */
import { join } from 'node:path';
import t from 'tap';
import { chromiumAbsent, openBrowser } from '../helpers/browser.js';
import { programDir, startServer } from '../helpers/programs.js';

const skip = chromiumAbsent();
if (skip) t.comment(`browser tests skipped: ${skip}`);

t.test('the console lists techniques and shows one, and a directive links to its technique', { skip }, async (t) => {
  const dir = programDir(t);
  const { server, token, api } = await startServer(t, join(dir, 'server'));
  const technique = {
    name: 'Nginx server', version: '1.2', description: 'The web front',
    parameters: [{ name: 'conf', type: 'string', required: true }, { name: 'sites', type: 'list', default: ['default'] }],
    calls: [
      { id: 'install', method: 'package_present', params: { name: 'nginx' } },
      { id: 'site', name: 'Site {{item}}', foreach: 'sites', method: 'file_line_present', params: { path: '/etc/nginx/sites', line: '{{item}}' }, if: "!error('install')" },
    ],
  };
  t.equal((await api('PUT', '/api/1/techniques/nginx_server', technique)).status, 201);
  t.equal((await api('POST', '/api/1/directives', { id: 'web', method: 'technique', technique: { id: 'nginx_server', version: '1.2' }, params: { conf: '/etc/nginx/nginx.conf' } })).status, 201);

  const { page, problems } = await openBrowser(t, 'console-techniques');
  await page.goto(`${server.url}/#/techniques`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  const row = page.locator('table.list tbody tr').filter({ hasText: 'nginx_server' });
  await row.waitFor();
  // The directives using it come with their own answer, which may follow the techniques'.
  await row.getByRole('link', { name: 'web' }).waitFor();
  t.same(await row.locator('td').allInnerTexts(), ['1.2', 'conf, sites', '2', 'web'], 'version, parameters, calls, the directive using it');

  await row.getByRole('link', { name: 'Nginx server' }).click();
  await page.getByRole('heading', { name: 'Technique Nginx server' }).waitFor();
  const calls = page.locator('#calls tbody tr');
  t.equal(await calls.count(), 2);
  t.match(await calls.nth(1).innerText(), /site[\s\S]*file_line_present[\s\S]*for each of sites; if result: !error\('install'\)/);
  t.match(await page.locator('#parameters').innerText(), /conf\s+string\s+yes/);

  await page.getByRole('link', { name: 'web', exact: true }).first().click();
  await page.getByRole('heading', { name: /^Directive web/ }).waitFor();
  // Its form: the technique chosen, one input per technique parameter, the saved values in them.
  await page.getByRole('link', { name: 'Edit', exact: true }).click();
  await page.getByRole('heading', { name: 'Edit directive web' }).waitFor();
  t.equal(await page.locator('#f-technique-id').inputValue(), 'nginx_server');
  t.equal(await page.locator('#f-params-conf').inputValue(), '/etc/nginx/nginx.conf');
  t.equal(await page.locator('#f-params-sites').inputValue(), '', 'a list parameter left to its default');
  await page.goBack();
  await page.getByRole('heading', { name: /^Directive web/ }).waitFor();
  await page.getByRole('link', { name: 'nginx_server' }).click();
  await page.getByRole('heading', { name: 'Technique Nginx server' }).waitFor();
  t.same(problems, [], 'no Content-Security-Policy violation, no page error');
});
