/**
 * The whole agent inside a throwaway root (test/helpers/root.ts, `network: 'host'`), against a
 * server and a relay on loopback outside it: it enrols, is accepted, and its run applies a
 * user_present directive with the real useradd; the server counts the directive compliant from
 * the run log. The user exists in the root only. This is how a test drives a node that changes
 * its system, with the programs as an admin runs them.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { programDir, serverAndRelay, waitFor } from '../helpers/programs.js';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(180_000);

const why = await rootSkipReason({ network: 'host' });
t.test('an agent run inside a root applies user_present and the server sees it compliant', { skip: why }, async (t) => {
  const dir = programDir(t);
  const { relay, api } = await serverAndRelay(t, dir);
  const root = await throwawayRoot(t, { network: 'host' });
  const run = (extra: string[] = []) => root.agent(['run', '--relay', relay.url, '--state-dir', '/var/lib/capstan/agent', '--log-level', 'error', ...extra]);

  t.equal((await run()).code, 5, 'the first run waits for acceptance');
  const id = (await root.exec('cat', ['/var/lib/capstan/agent/node-id'])).stdout.trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.data?.some((n: { id: string }) => n.id === id) ? true : undefined), 'the pending node');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const user = { name: 'capstan-e2e', shell: '/bin/sh', comment: 'Made by an agent in a root' };
  t.equal((await api('POST', '/api/1/directives', { id: 'e2e-user', name: 'A user', method: 'user_present', params: user })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'root-node', name: 'The node in a root', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'accounts', name: 'Accounts', directives: ['e2e-user'], groups: ['root-node'] })).status, 201);

  const first = await run();
  t.equal(first.code, 0, first.stderr);
  t.match(first.stdout, /1 repaired, 0 errors/);
  t.match((await root.exec('getent', ['passwd', 'capstan-e2e'])).stdout, /^capstan-e2e:x:\d+:\d+:Made by an agent in a root:[^:]*:\/bin\/sh$/m);
  t.match((await run()).stdout, /0 repaired, 0 errors/, 'the second run changes nothing');
  const compliance = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${id}/compliance`)).json.data;
    const d = c?.directives?.find((x: { directive_id: string }) => x.directive_id === 'e2e-user');
    return d?.counts?.success === 1 ? d : undefined;
  }, 'the directive compliant at the server');
  t.match(compliance, { rule_id: 'accounts', counts: { success: 1, error: 0, missing: 0 } });
  t.notMatch(readFileSync('/etc/passwd', 'utf8'), /^capstan-e2e:/m, 'the host has no such user');
});
