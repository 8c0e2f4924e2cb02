/**
 * Every method's parameter docs (shared/src/policy/params.ts, on each spec) agree with its
 * validation, which the server and the agent check with: the spec's example is valid; every
 * documented parameter is accepted added to it with its example (a parameter `validate` never
 * reads is refused as a misspelling, so a documented name that does not exist fails here); each
 * required one, taken away, is refused; and every parameter `validate` reads is documented. The
 * console's directive form and GET /api/1/methods are made from these docs.
 */
import t from 'tap';
import { METHOD_SPECS, validateMethodParams } from '@capstan/shared/policy/methods';
import type { ParamDoc } from '@capstan/shared/policy/params';

/** A value for a documented parameter: its example, else its first allowed value, else a boolean's opposite default. */
function sample(d: ParamDoc): unknown {
  if (d.example !== undefined) return d.example;
  if (d.values?.length) return d.values[0];
  if (d.type === 'boolean') return !(d.default ?? false);
  return undefined;
}

/** The top-level fields `validate` reads for `params` (what validateMethodParams tracks too). */
function readsOf(method: string, params: Record<string, unknown>): Set<string> {
  const read = new Set<string>();
  const proxy = new Proxy(params, { get: (o, k, r) => { if (typeof k === 'string') read.add(k); return Reflect.get(o, k, r); } });
  METHOD_SPECS.get(method)!.validate(proxy);
  return read;
}

for (const [name, spec] of METHOD_SPECS) {
  t.test(`${name}: its parameter docs agree with its validation`, async (t) => {
    t.ok(spec.params && spec.params.length > 0, 'documented parameters');
    t.ok(spec.example, 'a minimal example');
    if (!spec.params || !spec.example) return;
    const docs = new Map(spec.params.map((d) => [d.name, d]));
    t.equal(docs.size, spec.params.length, 'each parameter documented once');
    t.doesNotThrow(() => validateMethodParams(name, spec.example), 'the example is valid');
    for (const k of Object.keys(spec.example)) t.ok(docs.has(k), `the example's ${k} is documented`);
    const read = readsOf(name, { ...spec.example });
    for (const d of spec.params) {
      t.ok(d.description.length > 0, `${d.name} says what it does`);
      const v = sample(d);
      if (v === undefined) continue;
      const withIt = { ...spec.example, [d.name]: v };
      // Parameters that exclude each other: the one given by the example makes way for this one.
      const exclusive: Record<string, string[]> = { template: ['source'], source: ['template'], insert_before: ['insert_after'], insert_after: ['insert_before'], signed_by: ['key'], key: ['signed_by'], mirrorlist: ['baseurl'], metalink: ['baseurl'] };
      for (const other of exclusive[d.name] ?? []) if (!(d.name in spec.example)) delete withIt[other];
      t.doesNotThrow(() => validateMethodParams(name, withIt), `${d.name} = ${JSON.stringify(v)} is accepted`);
      readsOf(name, withIt).forEach((r) => read.add(r));
    }
    for (const r of read) t.ok(docs.has(r), `${r}, which validation reads, is documented`);
    for (const d of spec.params.filter((x) => x.required)) {
      const without = { ...spec.example };
      delete without[d.name];
      t.throws(() => validateMethodParams(name, without), { code: 'ERR_METHOD_PARAMS' }, `without ${d.name}: refused`);
    }
  });
}
