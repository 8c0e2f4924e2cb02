/**
 * One fact namespace (shared/src/policy/data.ts): the same node answers the same for a filter
 * (`fact:<path> = v`, evaluated in memory as the server's SQL is held to), a condition
 * (`fact('<path>') == 'v'`) and a template (`{{<path>}}`), over a table of paths: inventory
 * fields, list items by index, custom facts at the top level and at `facts.*`, a custom fact an
 * inventory field shadows, excluded and reserved names, and names that reach no prototype.
 */
import t from 'tap';
import fc from 'fast-check';
import {
  evaluateCondition, evaluateFilter, factText, factTree, indexedFacts, isCapstanError, lookupPath, nodeData, parseCondition, parseFilter,
  renderTemplate, type ConditionEnv, type FilterSubject,
} from '@capstan/shared';

const inventory = {
  node_id: 'n1', hostname: 'web1', fqdn: 'web1.example.com', certificate: '-----BEGIN CERTIFICATE-----', machine_id: 'abc',
  os: { name: 'debian', version: '12', kernel: '6.1.0', arch: 'x86_64' }, cpus: { count: 4, model: 'x' }, memory: { total: 8589934592 },
  disks: [{ device: '/dev/sda1', mount: '/', size: 1000 }], interfaces: [{ name: 'eth0', addresses: [{ family: 'IPv4', address: '10.0.0.5' }] }],
  packages: [{ name: 'nginx', version: '1.22' }],
  facts: { role: 'web', site: { room: 'b2' }, hostname: 'shadowed', node: 'mine', enabled: true, racks: [3, 4] },
};
const view = { id: 'n1', hostname: 'web1', relay: 'relay-1', properties: { owner: 'ops' } };
const data = nodeData(inventory, view);

const subject: FilterSubject = {
  id: 'n1', hostname: 'web1', fqdn: 'web1.example.com', os_name: 'debian', os_version: '12', os_kernel: '6.1.0', arch: 'x86_64', cpus: 4, memory: 8589934592,
  addresses: [], packages: {}, facts: Object.fromEntries(indexedFacts(inventory)), properties: {}, tags: {}, state: 'running', status: 'reachable',
  manager: 'agent', accepted: 'accepted', groups: [], last_run_at: null, last_inventory_at: null,
};
const env: ConditionEnv = { identities: [], hasFile: () => false, hasDirectory: () => false, hasCommand: () => false, fact: (p) => lookupPath(data, p) };

const filterSays = (path: string, value: string) => evaluateFilter(parseFilter(`fact:"${path}" = "${value}"`), subject, new Date());
const conditionSays = (path: string, value: string) => evaluateCondition(parseCondition(`fact('${path}') == '${value}'`), env);
const templateSays = (path: string, d: unknown = data): string | undefined => {
  try {
    return renderTemplate(`{{{${path}}}}`, d);
  } catch (err) {
    if (isCapstanError(err) && err.code === 'ERR_TEMPLATE') return undefined;
    throw err;
  }
};

/** path → its value as text, or undefined: not node data. */
const TABLE: Array<[string, string | undefined]> = [
  ['os.name', 'debian'], ['os.version', '12'], ['fqdn', 'web1.example.com'], ['hostname', 'web1'], ['machine_id', 'abc'],
  ['cpus.count', '4'], ['memory.total', '8589934592'], ['disks.0.size', '1000'], ['disks.0.mount', '/'], ['interfaces.0.name', 'eth0'],
  ['interfaces.0.addresses.0.address', '10.0.0.5'],
  ['role', 'web'], ['facts.role', 'web'], ['site.room', 'b2'], ['facts.site.room', 'b2'], ['enabled', 'true'], ['racks.1', '4'],
  ['facts.hostname', 'shadowed'], ['facts.node', 'mine'],
  ['disks.1.size', undefined], ['packages.0.name', undefined], ['certificate', undefined], ['nope', undefined], ['os.nope', undefined],
  ['constructor', undefined], ['os.__proto__', undefined], ['racks.length', undefined], ['role.length', undefined],
];

t.test('a filter, a condition and a template read the same value at every path', async (t) => {
  for (const [path, want] of TABLE) {
    if (want === undefined) {
      t.notOk(filterSays(path, 'x') || Object.keys(subject.facts).some((p) => p === path || p.startsWith(`${path}.`)), `${path}: no filter sees it`);
      t.notOk(evaluateCondition(parseCondition(`fact('${path}')`), env), `${path}: the condition is false`);
      t.equal(templateSays(path), undefined, `${path}: the template refuses it`);
      continue;
    }
    t.ok(filterSays(path, want), `${path}: filter = ${want}`);
    t.ok(conditionSays(path, want), `${path}: condition == ${want}`);
    t.equal(templateSays(path), want, `${path}: template renders ${want}`);
    t.notOk(filterSays(path, `${want}-other`) || conditionSays(path, `${want}-other`), `${path}: neither matches another value`);
  }
});

t.test('custom facts are hoisted unless an inventory field or a reserved name has the name', async (t) => {
  const tree = factTree(inventory);
  t.equal(tree.hostname, 'web1', 'the inventory wins');
  t.notOk(Object.hasOwn(tree, 'node'), 'node is reserved for the registry view');
  t.notOk(Object.hasOwn(tree, 'packages'), 'packages are for package:');
  t.same(lookupPath(data, 'node'), view, 'node.* is the registry view in conditions and templates');
  t.equal(renderTemplate('{{node.relay}} {{node.properties.owner}}', data), 'relay-1 ops');
  t.equal(lookupPath(data, ''), undefined);
  t.equal(lookupPath(data, 'a..b'), undefined);
});

t.test('property: for random fact documents, every indexed leaf is what lookupPath and a template give', async (t) => {
  const key = fc.constantFrom('a', 'b', 'role', 'os', 'x1', '', 'a.b', 'constructor');
  const doc = fc.record({ os: fc.record({ name: fc.constantFrom('debian', 'rocky') }), facts: fc.dictionary(key, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }) });
  fc.assert(fc.property(doc, (inv) => {
    const d = nodeData(inv, view);
    return indexedFacts(inv).every(([path, text]) => {
      const v = lookupPath(d, path);
      if (v === undefined || factText(v) !== text) return false;
      // Keys holding braces or spaces cannot be written inside a tag; all others render the same.
      if (/[{}\s]/.test(path)) return true;
      return templateSays(path, d) === (typeof v === 'string' ? v : v === null ? '' : JSON.stringify(v));
    });
  }), { numRuns: 300 });
});
