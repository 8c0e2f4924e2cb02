/**
 * The pure property merge (server/src/policy/properties.ts): global < groups by priority < node,
 * objects merged key by key, lists and scalars replaced, each leaf's origin kept, and conflicts
 * between groups of equal priority found whatever the groups' order. Table cases, then properties
 * over random levels (fast-check).
 */
import t from 'tap';
import fc from 'fast-check';
import {
  checkPriority, checkPropertySet, deepEqual, mergeProperties, mergeValues, type GroupProperties, type Json, type LeafOrigin, type PropertySet,
} from '@capstan/server/policy/properties';
import { nodeLevel, withNodeLevel } from '@capstan/server/policy/render';

const set = (o: Record<string, Json>): PropertySet => Object.fromEntries(Object.entries(o).map(([k, value]) => [k, { value }]));
const originOf = (origins: LeafOrigin[], path: string) => origins.find((o) => o.path.join('.') === path);

t.test('objects merge key by key, lists and scalars are replaced, the node wins', async (t) => {
  const m = mergeProperties(
    set({ dc: { dns: '10.0.0.1', ntp: 'pool' }, list: [1], owner: 'ops' }),
    [{ id: 'web', properties: set({ dc: { dns: '10.0.0.2' }, list: [2] }) }],
    set({ owner: 'alice' }),
  );
  t.same(m.effective, { dc: { dns: '10.0.0.2', ntp: 'pool' }, list: [2], owner: 'alice' });
  t.same(originOf(m.origins, 'dc.dns'), { path: ['dc', 'dns'], value: '10.0.0.2', origin: { level: 'group', id: 'web' },
    overridden: [{ origin: { level: 'global' }, value: '10.0.0.1', path: ['dc', 'dns'] }] });
  t.same(originOf(m.origins, 'dc.ntp')!.origin, { level: 'global' });
  t.same(originOf(m.origins, 'owner')!.origin, { level: 'node' });
  t.same(m.conflicts, []);
});

t.test('a higher priority wins; a type change takes the later value whole', async (t) => {
  const m = mergeProperties(set({ port: 80 }), [
    { id: 'b', priority: 10, properties: set({ port: { http: 8080 } }) },
    { id: 'a', priority: 5, properties: set({ port: 81 }) },
  ], {});
  t.same(m.effective, { port: { http: 8080 } });
  const o = originOf(m.origins, 'port.http')!;
  t.same(o.origin, { level: 'group', id: 'b' });
  t.same(o.overridden?.map((x) => x.value), [80, 81], 'what it replaced above it on its branch, earliest first');
});

t.test('groups of equal priority that disagree conflict; equal values, or objects with other keys, do not', async (t) => {
  const groups: GroupProperties[] = [
    { id: 'g2', properties: set({ dns: '1.1.1.1', same: 'x', obj: { a: 1 }, deep: { a: { b: 1 } } }) },
    { id: 'g1', properties: set({ dns: '8.8.8.8', same: 'x', obj: { b: 2 }, deep: { a: { b: 2 } } }) },
    { id: 'g3', priority: 1, properties: set({ dns: '9.9.9.9' }) },
  ];
  const m = mergeProperties({}, groups, set({ dns: 'node' }));
  t.same(m.conflicts, [
    { path: ['deep', 'a', 'b'], priority: 0, groups: [{ id: 'g1', value: 2 }, { id: 'g2', value: 1 }] },
    { path: ['dns'], priority: 0, groups: [{ id: 'g1', value: '8.8.8.8' }, { id: 'g2', value: '1.1.1.1' }] },
  ], 'a conflict stands whatever a higher group or the node says');
  t.same(m.effective.dns, 'node');
});

t.test('a property is secret when any level says so', async (t) => {
  const m = mergeProperties({ pw: { value: 'default', secret: true } }, [], { pw: { value: 'mine' } });
  t.same(m.secrets, ['pw']);
  t.equal(m.effective.pw, 'mine');
});

t.test('bad property sets and priorities are refused naming the field', async (t) => {
  t.same(checkPropertySet({ a: { value: { b: [1, null] } }, s: { value: 'x', secret: true } }), { a: { value: { b: [1, null] } }, s: { value: 'x', secret: true } });
  const cases: Array<[unknown, string]> = [
    [[], 'properties'],
    [{ 'a.b': { value: 1 } }, 'properties.a.b'],
    [{ a: 1 }, 'properties.a'],
    [{ a: { value: 1, extra: 1 } }, 'properties.a'],
    [{ a: { value: 1, secret: 'yes' } }, 'properties.a.secret'],
    [{ a: { value: 1, secret: true } }, 'properties.a.value'],
    [{ a: { value: 'x'.repeat(70_000) } }, 'properties.a.value'],
    [{ a: { value: JSON.parse('['.repeat(20) + ']'.repeat(20)) } }, 'properties.a.value'],
    [Object.fromEntries(Array.from({ length: 501 }, (_, i) => [`p${i}`, { value: i }])), 'properties'],
  ];
  for (const [v, field] of cases) t.throws(() => checkPropertySet(v), { code: 'ERR_PROPERTIES_INVALID', details: { field } }, field);
  t.equal(checkPriority(undefined), 0);
  t.throws(() => checkPriority(1.5), { code: 'ERR_PROPERTIES_INVALID' });
});

// Random levels: values over a few names and keys, so that levels overlap often.
const leaf = fc.oneof(fc.integer({ min: 0, max: 3 }), fc.constantFrom('a', 'b'), fc.boolean(), fc.constant(null), fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 2 }));
const value: fc.Arbitrary<Json> = fc.letrec<{ v: Json }>((tie) => ({
  v: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.dictionary(fc.constantFrom('x', 'y', 'z'), tie('v'), { maxKeys: 3 })),
})).v;
const props = fc.dictionary(fc.constantFrom('p', 'q', 'r'), value.map((v) => ({ value: v })), { maxKeys: 3 });
const groupsArb = fc.uniqueArray(fc.record({ id: fc.constantFrom('g1', 'g2', 'g3', 'g4'), priority: fc.integer({ min: 0, max: 2 }), properties: props }), { selector: (g) => g.id, maxLength: 4 });

/** The value of `path` in a level's input, or undefined. */
function valueAt(s: PropertySet, path: string[]): Json | undefined {
  let v: Json | undefined = Object.hasOwn(s, path[0]!) ? s[path[0]!]!.value : undefined;
  for (const k of path.slice(1)) v = v !== null && typeof v === 'object' && !Array.isArray(v) && Object.hasOwn(v, k) ? v[k] : undefined;
  return v;
}

t.test('property: origins point at the level that set each value, and the node is applied last', async (t) => {
  fc.assert(fc.property(props, groupsArb, props, (global, groups, node) => {
    const m = mergeProperties(global, groups, node);
    for (const o of m.origins) {
      const level = o.origin.level === 'global' ? global : o.origin.level === 'node' ? node : groups.find((g) => g.id === (o.origin as { id: string }).id)!.properties;
      if (!deepEqual(valueAt(level, o.path)!, o.value)) return false;
      // The leaf is in the effective properties with that value.
      if (!deepEqual(valueAt(Object.fromEntries(Object.entries(m.effective).map(([k, v]) => [k, { value: v }])), o.path)!, o.value)) return false;
    }
    // A node value that is not an object is the effective value, whatever the groups say.
    return Object.entries(node).every(([k, p]) => (p.value !== null && typeof p.value === 'object' && !Array.isArray(p.value)) || deepEqual(m.effective[k]!, p.value));
  }), { numRuns: 300 });
});

t.test('property: merge order is global, then groups by ascending priority, then node', async (t) => {
  fc.assert(fc.property(props, groupsArb, props, (global, groups, node) => {
    const sorted = [...groups].sort((a, b) => a.priority - b.priority || (a.id < b.id ? -1 : 1));
    const levels = [global, ...sorted.map((g) => g.properties), node];
    const expected: Record<string, Json> = {};
    for (const l of levels) for (const [k, p] of Object.entries(l)) expected[k] = mergeValues(Object.hasOwn(expected, k) ? expected[k] : undefined, p.value);
    return deepEqual(mergeProperties(global, groups, node).effective, expected);
  }), { numRuns: 300 });
});

t.test('property: conflicts are symmetric and do not depend on the groups\' order; equal values never conflict', async (t) => {
  fc.assert(fc.property(props, groupsArb, fc.integer(), (global, groups, seed) => {
    const a = mergeProperties(global, groups, {}).conflicts;
    const shuffled = [...groups].sort((x, y) => ((x.id.charCodeAt(1) * seed) % 7) - ((y.id.charCodeAt(1) * seed) % 7));
    const b = mergeProperties(global, shuffled.reverse(), {}).conflicts;
    if (!deepEqual(a as unknown as Json, b as unknown as Json)) return false;
    // Each conflict names at least two groups of its priority that disagree there.
    return a.every((c) => c.groups.length >= 2 && c.groups.some((g) => !deepEqual(g.value, c.groups[0]!.value)));
  }), { numRuns: 300 });
  fc.assert(fc.property(props, fc.integer({ min: 2, max: 4 }), (p, n) => {
    const same = Array.from({ length: n }, (_, i) => ({ id: `g${i}`, properties: structuredClone(p) }));
    return mergeProperties({}, same, {}).conflicts.length === 0;
  }), { numRuns: 200 });
});

t.test('property: the merge is associative where no path changes between object and value', async (t) => {
  // Fixed shapes: `o` is always an object of scalars, `s` always a scalar or list.
  const shaped = fc.record({ o: fc.dictionary(fc.constantFrom('x', 'y'), leaf, { maxKeys: 2 }), s: leaf }, { requiredKeys: [] }) as fc.Arbitrary<Json>;
  fc.assert(fc.property(shaped, shaped, shaped, (a, b, c) => deepEqual(mergeValues(mergeValues(a, b), c), mergeValues(a, mergeValues(b, c)))), { numRuns: 300 });
});

t.test('property: a node\'s JSON values over the shared global and group merge give the full merge', async (t) => {
  // Generation merges the global and group levels once per group set, then each node's own
  // values over them (render.ts withNodeLevel); the API shows the full merge with origins.
  const nodeValues = fc.dictionary(fc.constantFrom('p', 'q', 'r', 's'), value, { maxKeys: 4 });
  fc.assert(fc.property(props, groupsArb, nodeValues, (global, groups, own) => {
    const base = mergeProperties(global, groups, {});
    const full = mergeProperties(global, groups, nodeLevel(own));
    if (!deepEqual(withNodeLevel(base, own).effective as Json, full.effective as Json)) return false;
    // A leaf the node's level set has the node's value.
    return full.origins.filter((o) => o.origin.level === 'node').every((o) => deepEqual(o.value, valueAt(nodeLevel(own), o.path)!));
  }), { numRuns: 400 });
  t.same(withNodeLevel({ effective: { dc: { dns: 'a', ntp: 'b' } }, secrets: [] }, { dc: { ntp: 'n' }, port: 8080, tags: ['x'] }).effective,
    { dc: { dns: 'a', ntp: 'n' }, port: 8080, tags: ['x'] }, 'objects merge key by key, other values replace');
});
