/**
 * Techniques (shared/src/policy/technique.ts): validation at save with field-level errors,
 * instantiation (defaults, loops, rendering, per-node method checks), the bundle a technique's
 * directive travels in (verifyBundle, config id, expectations), and result conditions.
 */
import { generateKeyPairSync } from 'node:crypto';
import t from 'tap';
import {
  bundleExpectations, checkCallReports, computeConfigId, instantiate, nodeData, parseCondition, parseTechnique, resultCondition, signBundle,
  techniqueDirective, verifyBundle, policyKeyId, type CallOutcome, type PolicyBundle,
} from '@capstan/shared';

const NGINX = {
  id: 'nginx_server', name: 'Nginx server', version: '1.0',
  parameters: [
    { name: 'workers', type: 'string', default: 'auto' },
    { name: 'sites', type: 'list', default: ['default'] },
    { name: 'conf', type: 'string', required: true },
  ],
  calls: [
    { id: 'install', method: 'package_present', params: { name: 'nginx' } },
    { id: 'config', name: 'Nginx config', method: 'file_content', params: { path: '{{params.conf}}', content: 'worker_processes {{params.workers}}; # {{node.hostname}} {{os.name}}\n' } },
    { id: 'site', name: 'Site {{item}}', foreach: 'sites', method: 'file_line_present', params: { path: '/etc/nginx/sites', line: '{{item}}' } },
    { id: 'restart', name: 'Restart', method: 'command_run', if: "repaired('config') || repaired('site')", params: { command: '/bin/systemctl', args: ['restart', 'nginx'], unless: { command: '/bin/false' } } },
  ],
};

const data = nodeData({ hostname: 'web1', os: { name: 'debian' }, facts: { role: 'web' } }, { id: 'n1', hostname: 'web1', relay: 'root', properties: {} });

t.test('a valid technique parses with its defaults', async (t) => {
  const tech = parseTechnique(NGINX);
  t.equal(tech.calls.length, 4);
  t.same(tech.parameters[0], { name: 'workers', type: 'string', default: 'auto' });
});

t.test('what is wrong is named by its field', async (t) => {
  const bad = (patch: (x: any) => void, field: string, code = 'ERR_TECHNIQUE_INVALID') => {
    const body = structuredClone(NGINX) as any;
    patch(body);
    t.throws(() => parseTechnique(body), { code, details: { field } }, field);
  };
  bad((b) => { b.id = 'bad id'; }, 'id');
  bad((b) => { b.version = '1'; }, 'version');
  bad((b) => { b.parameters[0].type = 'text'; }, 'parameters[0].type');
  bad((b) => { b.parameters[1].default = 'x'; }, 'parameters[1].default');
  bad((b) => { b.parameters.push({ name: 'workers' }); }, 'parameters[3].name');
  bad((b) => { b.calls[0].method = 'package_installed'; }, 'calls[0].method');
  bad((b) => { b.calls[1].id = 'install'; }, 'calls[1].id');
  bad((b) => { b.calls[0].params.name = 'not a package!'; }, 'calls[0].params.name');
  bad((b) => { b.calls[0].params.version = '{{params.workers}}!'; }, 'calls[0].params.version');
  bad((b) => { b.calls[1].params.content = '{{params.nope}}'; }, 'calls[1].params.content');
  bad((b) => { b.calls[1].params.content = '{{item}}'; }, 'calls[1].params.content');
  bad((b) => { b.calls[1].params.content = '{{#params.workers}}'; }, 'calls[1].params.content', 'ERR_TEMPLATE');
  bad((b) => { b.calls[1].params.content = '{{node.ip}}'; }, 'calls[1].params.content');
  bad((b) => { b.calls[2].foreach = 'workers'; }, 'calls[2].foreach');
  bad((b) => { b.calls[2].name = 'Site'; }, 'calls[2].name');
  bad((b) => { b.calls[3].if = "repaired('later')"; }, 'calls[3].if');
  bad((b) => { b.calls[0].if = "repaired('config')"; }, 'calls[0].if');
  bad((b) => { b.calls[3].if = "repaired('config'"; }, 'calls[3].if');
  bad((b) => { b.calls[0].condition = "repaired('config')"; }, 'calls[0].condition');
  bad((b) => { b.calls[0].mode = 'dry'; }, 'calls[0].mode');
  bad((b) => { b.calls[0].extra = 1; }, 'calls[0].extra');
  bad((b) => { b.calls = Array.from({ length: 201 }, (_, i) => ({ id: `c${i}`, method: 'file_absent', params: { path: '/x' } })); }, 'calls');
});

t.test('an instance: values checked and defaulted, loops unrolled, params rendered and checked per node', async (t) => {
  const tech = parseTechnique(NGINX);
  const inst = instantiate(tech, { conf: '/etc/nginx/nginx.conf', sites: ['a', 'b'] }, data);
  t.same(inst.params, { workers: 'auto', sites: ['a', 'b'], conf: '/etc/nginx/nginx.conf' });
  t.same(inst.calls.map((c) => [c.id, c.component]), [['install', 'Package present'], ['config', 'Nginx config'], ['site.0', 'Site a'], ['site.1', 'Site b'], ['restart', 'Restart']]);
  t.equal(inst.calls[1]!.params.content, 'worker_processes auto; # web1 debian\n');
  t.same(inst.reads, ['item', 'node.hostname', 'os.name', 'params.conf', 'params.workers']);
  t.throws(() => instantiate(tech, {}, data), { code: 'ERR_TECHNIQUE_INVALID', details: { field: 'params.conf' } }, 'a required value');
  t.throws(() => instantiate(tech, { conf: '/x', bogus: 1 }, data), { code: 'ERR_TECHNIQUE_INVALID', details: { field: 'params.bogus' } });
  t.throws(() => instantiate(tech, { conf: 7 }, data), { code: 'ERR_TECHNIQUE_INVALID', details: { field: 'params.conf' } });
  t.throws(() => instantiate(tech, { conf: 'relative' }, data), { code: 'ERR_METHOD_PARAMS', details: { field: 'calls[1].params.path' } }, 'checked by the method once rendered');
  t.throws(() => instantiate(tech, { conf: '/x', sites: ['a', 'a'] }, data), { code: 'ERR_TECHNIQUE_INVALID', details: { field: 'calls[2].name' } }, 'two calls may not report one component');
  t.throws(() => instantiate(tech, { conf: '/x', sites: Array(1001).fill(0).map((_, i) => `s${i}`) }, data), { code: 'ERR_TECHNIQUE_INVALID', details: { field: 'params.sites' } });
  const fromProps = instantiate(tech, { conf: '/etc/${node.hostname}.conf' }, data);
  t.equal(fromProps.params.conf, '/etc/web1.conf', 'values are rendered with the node data first');
});

t.test("a technique's directive travels in a verified bundle; its calls are what compliance expects", async (t) => {
  const tech = parseTechnique(NGINX);
  const d = techniqueDirective({ id: 'web', name: 'Web', mode: 'enforce', rule_id: 'r1' }, tech, instantiate(tech, { conf: '/etc/nginx/nginx.conf' }, data));
  const plain = { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'x' }, mode: 'enforce' as const, rule_id: 'r1' };
  t.equal(computeConfigId([plain]), computeConfigId([plain], {}), 'a bundle without properties or secrets keeps its old config id');
  t.not(computeConfigId([plain]), computeConfigId([plain], { properties: { a: 1 } }), 'properties count in the config id');
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const priv = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const pub = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const pinned = { keyId: policyKeyId(pub), publicKeyPem: pub };
  const bundle: PolicyBundle = { node_id: 'n1', config_id: computeConfigId([plain, d]), generated_at: 'x', directives: [plain, d], properties: { owner: 'ops' } };
  t.same(verifyBundle(signBundle(bundle, priv), pinned, 'n1'), bundle);
  t.same(bundleExpectations([plain, d]).filter((e) => e.rule_id === 'r1').map((e) => `${e.directive_id}/${e.component}`),
    ['motd/File content', 'web/Package present', 'web/Nginx config', 'web/Site default', 'web/Restart']);
  for (const [patch, what] of [
    [(x: any) => { x.calls[0].params = null; }, 'params'], [(x: any) => { x.calls[1].id = 'install'; }, 'duplicate id'],
    [(x: any) => { x.calls[3].if = "repaired('x'"; }, 'if'], [(x: any) => { delete x.technique; }, 'technique'], [(x: any) => { x.calls = []; }, 'no calls'],
    [(x: any) => { x.secrets = { pw: 'clear text' }; }, 'secrets'],
  ] as const) {
    const broken = structuredClone(bundle);
    patch(broken.directives[1]);
    t.throws(() => verifyBundle(signBundle(broken, priv), pinned, 'n1'), { code: 'ERR_POLICY_INVALID' }, what);
  }
});

t.test('result conditions: each function, with node functions, and unknown without the node', async (t) => {
  const outcomes = new Map<string, CallOutcome>([['a', 'repaired'], ['b', 'kept'], ['c', 'error'], ['d', 'skipped']]);
  const env = { identities: ['web1'], hasFile: () => true, hasDirectory: () => false, hasCommand: () => false, fact: () => undefined };
  const cases: Array<[string, boolean | null]> = [
    ["repaired('a')", true], ["kept('a')", false], ["ok('a')", true], ["ok('b')", true], ["ok('c')", false], ["error('c')", true],
    ["skipped('d')", true], ["ok('d')", false], ["repaired('zzz')", false], ["!error('b') && kept('b')", true],
    ["repaired('a') && has_file('/x')", null], ["repaired('b') && has_file('/x')", false], ["repaired('a') || has_file('/x')", true],
  ];
  for (const [c, want] of cases) {
    t.equal(resultCondition(c, outcomes), want, `${c} without the node`);
    t.equal(resultCondition(c, outcomes, env), want ?? true, `${c} on the node`);
  }
  t.throws(() => parseCondition("repaired('a')"), { code: 'ERR_CONDITION_SYNTAX' }, 'a directive condition takes no result function');
});

t.test('the server replays a run from its reports and finds reports that break the result conditions', async (t) => {
  const tech = parseTechnique(NGINX);
  const { calls } = instantiate(tech, { conf: '/etc/nginx/nginx.conf' }, data);
  const reported = (config: string, restart: string) => new Map([['Package present', 'result_success'], ['Nginx config', config], ['Site default', 'result_success'], ['Restart', restart]]);
  t.ok(checkCallReports(calls, reported('result_repaired', 'result_repaired')).every((c) => c.consistent), 'a repair, then the restart');
  t.ok(checkCallReports(calls, reported('result_success', 'result_na')).every((c) => c.consistent), 'nothing changed, no restart');
  const wrong = checkCallReports(calls, reported('result_success', 'result_repaired'));
  t.same(wrong.filter((c) => !c.consistent).map((c) => [c.call, c.expected]), [['restart', 'na']], 'a restart without a repair before it');
});
