/**
 * The optional fields of an inventory (docs/inventory.md), checked field by field: a field of the
 * wrong JSON type (a number for a string, an object for an array, null, nested junk) is left out,
 * an array keeps its well-formed entries and an entry keeps its well-typed fields, and each field
 * that lost something is named in the inventory's `errors` object (`server.<field>` → why), so
 * the node view, the console and the filters show what was valid instead of failing on it.
 *
 * Applied at ingest (the stored document is the checked one) and again when an inventory is read
 * (documents stored before this check). Fields the contract does not name are kept as sent.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const kind = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`);
const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** An object's fields that have the type their name wants; the names of the others. */
function typedFields(o: Json, types: Record<string, (v: unknown) => boolean>): { kept: Json; dropped: string[] } {
  const kept: Json = {};
  const dropped: string[] = [];
  for (const [k, v] of Object.entries(o)) {
    const check = types[k];
    // null is how a field says "unknown" (an OCS interface without a mask or a MAC): kept as such.
    if (!check || v === undefined || v === null) kept[k] = v;
    else if (check(v)) kept[k] = v;
    else dropped.push(k);
  }
  return { kept, dropped };
}

/** An array of objects: entries that are objects with `required` strings, their typed fields kept. */
function objectList(v: unknown, types: Record<string, (v: unknown) => boolean>, required: string[]): { kept: Json[]; problems: number } {
  let problems = 0;
  const kept: Json[] = [];
  for (const item of v as unknown[]) {
    if (!isObject(item)) {
      problems++;
      continue;
    }
    const { kept: fields, dropped } = typedFields(item, types);
    if (required.some((r) => !isString(fields[r]))) {
      problems++;
      continue;
    }
    if (dropped.length) problems++;
    kept.push(fields);
  }
  return { kept, problems };
}

const STRING_FIELDS = { name: isString, version: isString, source: isString, source_version: isString, epoch: isString };
const DISK_FIELDS = { device: isString, mount: isString, fstype: isString, size: isNumber, free: isNumber };
// `cidr` as Node's os.networkInterfaces() and the OCS mapping write it: "192.0.2.10/24".
const ADDRESS_FIELDS = { family: isString, address: isString, cidr: isString };
const OS_EXTRA = { pretty_name: isString };
const CPU_FIELDS = { count: isNumber, model: isString };
const MEMORY_FIELDS = { total: isNumber, available: isNumber, swap_total: isNumber, swap_free: isNumber };
const CLOUD_FIELDS = { provider: isString, instance_id: isString, region: isString, account_id: isString };

/** One interface: a name, an optional MAC, addresses as objects with a string address (or strings). */
function iface(v: unknown): { value: Json | null; lost: boolean } {
  if (!isObject(v) || !isString(v.name)) return { value: null, lost: true };
  const { kept, dropped } = typedFields(v, { name: isString, mac: isString, addresses: Array.isArray });
  let lost = dropped.length > 0;
  if (Array.isArray(kept.addresses)) {
    const addrs: unknown[] = [];
    for (const a of kept.addresses as unknown[]) {
      if (isString(a)) addrs.push(a);
      else if (isObject(a) && isString(a.address)) {
        const f = typedFields(a, ADDRESS_FIELDS);
        if (f.dropped.length) lost = true;
        addrs.push(f.kept);
      } else lost = true;
    }
    kept.addresses = addrs;
  }
  return { value: kept, lost };
}

/**
 * The inventory with its optional fields checked (a new object; the input is not changed), and
 * the problems found (`server.<field>` → message), already merged into its `errors`.
 */
export function normaliseInventory(doc: Json): { doc: Json; problems: Record<string, string> } {
  const out: Json = { ...doc };
  const problems: Record<string, string> = {};
  const drop = (field: string, want: string) => {
    problems[`server.${field}`] = `${field} must be ${want}, got ${kind(out[field])}: left out`;
    delete out[field];
  };
  const partly = (field: string, what: string) => {
    problems[`server.${field}`] = `${field}: ${what} of the wrong type left out`;
  };

  for (const f of ['fqdn', 'machine_id']) if (f in out && !isString(out[f])) drop(f, 'a string');
  if ('uptime' in out && !isNumber(out.uptime)) drop('uptime', 'a number');
  if (isObject(out.os)) {
    const { kept, dropped } = typedFields(out.os, OS_EXTRA);
    if (dropped.length) {
      out.os = kept;
      partly('os', dropped.join(', '));
    }
  }
  for (const [f, types] of [['cpus', CPU_FIELDS], ['memory', MEMORY_FIELDS], ['cloud', CLOUD_FIELDS]] as const) {
    if (!(f in out)) continue;
    if (!isObject(out[f])) {
      drop(f, 'an object');
      continue;
    }
    const { kept, dropped } = typedFields(out[f] as Json, types);
    out[f] = kept;
    if (dropped.length) partly(f, dropped.join(', '));
  }
  for (const [f, types, required] of [['packages', STRING_FIELDS, ['name', 'version']], ['disks', DISK_FIELDS, []]] as const) {
    if (!(f in out)) continue;
    if (!Array.isArray(out[f])) {
      drop(f, 'an array');
      continue;
    }
    const { kept, problems: n } = objectList(out[f], types, [...required]);
    out[f] = kept;
    if (n) partly(f, `${n} entr${n === 1 ? 'y' : 'ies'} (or their fields)`);
  }
  if ('interfaces' in out) {
    if (!Array.isArray(out.interfaces)) drop('interfaces', 'an array');
    else {
      let n = 0;
      const kept: Json[] = [];
      for (const i of out.interfaces as unknown[]) {
        const { value, lost } = iface(i);
        if (lost) n++;
        if (value) kept.push(value);
      }
      out.interfaces = kept;
      if (n) partly('interfaces', `${n} entr${n === 1 ? 'y' : 'ies'} (or their fields)`);
    }
  }
  if ('facts' in out && !isObject(out.facts)) drop('facts', 'an object');
  for (const f of ['facts_errors', 'errors']) {
    if (!(f in out)) continue;
    if (!isObject(out[f])) {
      drop(f, 'an object');
      continue;
    }
    // Messages are shown as text: anything else is shown as its JSON.
    out[f] = Object.fromEntries(Object.entries(out[f] as Json).map(([k, v]) => [k, isString(v) ? v : JSON.stringify(v) ?? String(v)]));
  }
  if (Object.keys(problems).length) out.errors = { ...(isObject(out.errors) ? out.errors : {}), ...problems };
  return { doc: out, problems };
}
