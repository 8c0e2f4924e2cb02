/**
 * `capstan findings`, `events`, `subscriptions` and `deliveries` in process, against the whole
 * server in process: a webhook subscription added (its secret printed once), listed, disabled; the
 * events read after an id and by type; findings as a table and as the server's CSV; a dead
 * message listed and retried.
 */
import t from 'tap';
import { buildProgram, type CliIo } from '@capstan/server/admin-cli/commands';
import { serverWithApi } from '../helpers/admin-app.js';

class Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

async function capstan(args: string[], token: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const io: CliIo = {
    out: (s) => void (out += s), err: (s) => void (err += s), env: { HOME: '/nonexistent', CAPSTAN_TOKEN: token }, isTTY: false,
    exit: (code) => {
      throw new Exit(code);
    },
    sleep: async () => undefined,
  };
  try {
    await buildProgram(io).parseAsync(['node', 'capstan', ...args]);
    return { code: 0, out, err };
  } catch (e) {
    if (e instanceof Exit) return { code: e.code, out, err };
    throw e;
  }
}

t.test('subscriptions, events, findings and deliveries from the command line', async (t) => {
  const { server } = await serverWithApi(t, { 'notifications.enabled': false });
  const env = ['--url', server.url];
  const cli = (args: string[]) => capstan([...env, ...args], server.adminToken);

  let r = await cli(['--json', 'subscriptions', 'add', 'ops', '--webhook', 'https://hooks.example.com/capstan', '--type', 'node.*', '--type', 'finding.opened', '--min-severity', 'warning']);
  t.equal(r.code, 0, r.err);
  const made = JSON.parse(r.out).data;
  t.match(made, { id: 'ops', kind: 'webhook', types: ['node.*', 'finding.opened'], min_severity: 'warning' });
  t.match(made.secret, /^[A-Za-z0-9_-]{43}$/, 'the secret, printed once');
  r = await cli(['subscriptions', 'list']);
  t.match(r.out, /^ID\s+KIND\s+TARGET/);
  t.match(r.out, /ops\s+webhook\s+https:\/\/hooks\.example\.com\/capstan\s+node\.\*,finding\.opened\s+warning/);
  t.notMatch(r.out, new RegExp(made.secret));
  r = await cli(['--json', 'subscriptions', 'disable', 'ops']);
  t.equal(JSON.parse(r.out).data.enabled, false);
  r = await cli(['subscriptions', 'add', 'bad', '--webhook', 'ftp://example.com/']);
  t.equal(r.code, 4, 'a refused request');
  t.match(r.err, /ERR_SUBSCRIPTION_TARGET/);

  const ids = await server.store.insertEvents([
    { at: '2024-05-01T10:00:00Z', type: 'node.no_answer', severity: 'warning', node_id: 'n1', data: { relay: 'r1' } },
    { at: '2024-05-01T10:00:01Z', type: 'job.finished', severity: 'info', node_id: null, data: { job_id: 'j1' } },
  ]);
  r = await cli(['--json', 'events', 'list', '--after', String(ids[0]! - 1), '--type', 'node.*']);
  t.same(JSON.parse(r.out).data.map((e: { id: number }) => e.id), [ids[0]]);
  r = await cli(['events', 'list', '--after', String(ids[0])]);
  t.match(r.out, /job\.finished\s+info/);

  r = await cli(['findings', '--status', 'all']);
  t.equal(r.code, 0, r.err);
  t.match(r.out, /^ID\s+STATUS\s+KIND\s+NODE_ID/);
  r = await cli(['--csv', 'findings']);
  t.match(r.out, /^id,status,kind,node_id,rule_id,directive_id,component,key,event_type,message,first_seen_at/);

  r = await cli(['deliveries', 'list', '--state', 'dead']);
  t.equal(r.code, 0, r.err);
  r = await cli(['deliveries', 'retry', '12345']);
  t.equal(r.code, 6, 'not found');
  t.match(r.err, /ERR_NOT_FOUND/);
  r = await cli(['subscriptions', 'delete', 'ops']);
  t.equal(r.code, 0, r.err);
});
