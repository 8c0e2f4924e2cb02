/**
 * RUDDER agents' OCS inventories (FusionInventory XML, `<REQUEST><CONTENT>…`) read into Capstan's
 * inventory document (docs/inventory.md), so that such a node is pending, accepted and queried
 * like any other. The XML comes from the network before any signature is checked (a newcomer's
 * key is inside it), so it is read under explicit limits: its size, its element count, its depth,
 * in one linear pass (ocs-xml.ts), and never a DOCTYPE: no entity is declared, so none expands,
 * and nothing outside the document is ever read.
 */
import { capstanError } from '@capstan/shared/errors';
import type { InventoryDoc } from './inventory.js';
import { readXmlTree, startTagEnd, XmlShapeError } from './ocs-xml.js';

export interface OcsLimits {
  /** Largest XML, in bytes (`[limits] ocs_max_size`). */
  maxBytes: number;
  /** Deepest element nesting (`[limits] ocs_max_depth`). */
  maxDepth: number;
  /** Most elements (`[limits] ocs_max_elements`). */
  maxElements: number;
}

export const DEFAULT_OCS_LIMITS: OcsLimits = { maxBytes: 32 * 1024 * 1024, maxDepth: 16, maxElements: 1_000_000 };

/** Sections that repeat in an OCS inventory: always arrays, even with one entry. */
const REPEATED = new Set(['CPUS', 'DRIVES', 'NETWORKS', 'SOFTWARES', 'STORAGES', 'MEMORIES', 'AGENT', 'AGENT_CAPABILITY', 'SERVER_ROLE', 'COMMENTS']);

/** File systems FusionInventory lists among DRIVES that hold no disk: left out of `disks`. */
const NOT_DISKS = new Set(['tmpfs', 'devtmpfs', 'ramfs', 'squashfs', 'overlay', 'proc', 'sysfs', 'devpts', 'cgroup', 'cgroup2',
  'securityfs', 'debugfs', 'tracefs', 'pstore', 'bpf', 'mqueue', 'hugetlbfs', 'configfs', 'fusectl', 'autofs', 'binfmt_misc', 'nsfs', 'rpc_pipefs']);

type Node = Record<string, unknown>;

function invalid(msg: string): never {
  throw capstanError('ERR_OCS_INVALID', msg);
}

/** The five predefined XML entities and character references: fixed, one character each. */
function decode(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(/&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});/g, (m, e: string) => {
    const fixed: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };
    if (fixed[e]) return fixed[e];
    const cp = e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    return cp > 0 && cp <= 0x10ffff ? String.fromCodePoint(cp) : m;
  });
}

/** A leaf's text, or undefined when absent or empty. */
function text(node: unknown, key: string): string | undefined {
  if (!node || typeof node !== 'object') return undefined;
  let v = (node as Node)[key];
  if (Array.isArray(v)) v = v[0];
  if (typeof v === 'number' || typeof v === 'boolean') v = String(v);
  if (typeof v !== 'string') return undefined;
  const t = decode(v).trim();
  return t.length > 0 ? t : undefined;
}

function list(node: unknown, key: string): Node[] {
  if (!node || typeof node !== 'object') return [];
  const v = (node as Node)[key];
  const items = Array.isArray(v) ? v : v === undefined ? [] : [v];
  return items.filter((x): x is Node => !!x && typeof x === 'object');
}

function child(node: unknown, key: string): Node | undefined {
  return list(node, key)[0];
}

/** An OCS size in MB (FusionInventory's unit for memory and file systems) in bytes. */
function mb(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d{1,12}(\.\d+)?$/.test(value)) return undefined;
  return Math.round(Number(value) * 1024 * 1024);
}

function int(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,9}$/.test(value) ? Number(value) : undefined;
}

/** Dotted mask (255.255.255.0) or prefix length → prefix length. */
function prefixLength(mask: string | undefined): number | undefined {
  if (mask === undefined) return undefined;
  if (/^\d{1,3}$/.test(mask)) return Number(mask);
  const parts = mask.split('.');
  if (parts.length !== 4) return undefined;
  let bits = 0;
  for (const p of parts) {
    const n = Number(p);
    if (!/^\d{1,3}$/.test(p) || n > 255) return undefined;
    bits += n.toString(2).replace(/0/g, '').length;
  }
  return bits;
}

/**
 * Refuse what is never read: a DOCTYPE (entities, external subsets), over-large, over-full or
 * over-deep XML. The depth is counted here, as the elements open at once (a self-closing one
 * included), checked before the tree is built.
 */
function checkShape(xml: string, limits: OcsLimits): void {
  if (/<!DOCTYPE|<!ENTITY/i.test(xml)) throw capstanError('ERR_OCS_DOCTYPE', 'OCS inventory declares a DOCTYPE or an entity: refused, nothing in it is expanded');
  let elements = 0;
  let depth = 0;
  const tooDeep = () => capstanError('ERR_OCS_TOO_DEEP', `OCS inventory nests elements deeper than limits.ocs_max_depth (${limits.maxDepth})`);
  for (let i = xml.indexOf('<'); i >= 0; i = xml.indexOf('<', i + 1)) {
    const c = xml.charCodeAt(i + 1);
    if (xml.startsWith('<!--', i)) {
      i = skipTo(xml, '-->', i);
    } else if (xml.startsWith('<![CDATA[', i)) {
      i = skipTo(xml, ']]>', i);
    } else if (c === 63 /* ? */ || c === 33 /* ! */) {
      i = skipTo(xml, '>', i);
    } else if (c === 47 /* / */) {
      depth = Math.max(0, depth - 1);
      i = skipTo(xml, '>', i);
    } else if ((c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 58) {
      // A start tag: `<` then a name's first character.
      if (++elements > limits.maxElements) throw capstanError('ERR_OCS_TOO_LARGE', `OCS inventory has more than ${limits.maxElements} elements (limits.ocs_max_elements)`);
      if (depth + 1 > limits.maxDepth) throw tooDeep();
      const end = startTagEnd(xml, i);
      if (end < 0) return; // unterminated: the reader says so (ocs-xml.ts)
      if (xml.charCodeAt(end - 1) !== 47 /* / */) depth++;
      i = end;
    }
  }
}

/** Index of the last character of `end` after `from`, or the string's end. */
function skipTo(xml: string, end: string, from: number): number {
  const at = xml.indexOf(end, from + 1);
  return at < 0 ? xml.length : at + end.length - 1;
}

/** Parse OCS XML under the limits into its `REQUEST` element; coded errors for every refusal. */
export function parseOcsXml(bytes: Buffer, limits: OcsLimits = DEFAULT_OCS_LIMITS): Node {
  if (bytes.length > limits.maxBytes) throw capstanError('ERR_OCS_TOO_LARGE', `OCS inventory of ${bytes.length} bytes exceeds limits.ocs_max_size (${limits.maxBytes})`);
  const xml = bytes.toString('utf8');
  checkShape(xml, limits);
  let doc: Node;
  try {
    doc = readXmlTree(xml, REPEATED);
  } catch (err) {
    if (err instanceof XmlShapeError) invalid(`OCS inventory is not well-formed XML: ${err.message}`);
    throw err;
  }
  const request = child(doc, 'REQUEST');
  if (!request) invalid('OCS inventory has no <REQUEST> element');
  return request;
}

/** What `.sign` verification and the registry need besides the document. */
export interface OcsInventory {
  doc: InventoryDoc;
  /** The CFENGINE_KEY (PKCS#1 public key PEM) when the inventory carries one. */
  publicKey?: string;
}

/**
 * Map a parsed OCS `REQUEST` onto Capstan's inventory document. Required: RUDDER/UUID (the node
 * id), the agent's certificate (RUDDER/AGENT/AGENT_CERT), the policy server, a host name and the
 * OS name; the rest as present. The field table is in docs/inventory.md.
 */
export function mapOcs(request: Node): OcsInventory {
  const content = child(request, 'CONTENT') ?? invalid('OCS inventory has no <CONTENT>');
  const rudder = child(content, 'RUDDER') ?? invalid('OCS inventory has no <RUDDER> section (not from a RUDDER agent)');
  const agent = child(rudder, 'AGENT') ?? invalid('OCS inventory has no <RUDDER><AGENT>');
  const os = child(content, 'OPERATINGSYSTEM') ?? {};
  const hw = child(content, 'HARDWARE') ?? {};

  const nodeId = text(rudder, 'UUID') ?? invalid('OCS inventory has no RUDDER/UUID (node id)');
  const certificate = text(agent, 'AGENT_CERT') ?? invalid('OCS inventory has no RUDDER/AGENT/AGENT_CERT: the node\'s certificate is its identity');
  const policyServer = text(agent, 'POLICY_SERVER_UUID') ?? invalid('OCS inventory has no RUDDER/AGENT/POLICY_SERVER_UUID');
  const fqdn = text(os, 'FQDN') ?? text(rudder, 'HOSTNAME');
  const hostname = text(hw, 'NAME') ?? fqdn?.split('.')[0] ?? invalid('OCS inventory has no host name (HARDWARE/NAME, OPERATINGSYSTEM/FQDN or RUDDER/HOSTNAME)');
  const osName = text(os, 'NAME') ?? text(hw, 'OSNAME') ?? invalid('OCS inventory has no OS name (OPERATINGSYSTEM/NAME)');

  const cpus = list(content, 'CPUS');
  // Logical processors: cores × threads per core of each socket, when the agent says.
  let logical = 0;
  for (const c of cpus) logical += (int(text(c, 'CORE')) ?? 1) * (int(text(c, 'THREAD')) ?? 1);
  const cpuCount = cpus.length > 0 ? logical : int(text(hw, 'PROCESSORN'));
  const memory = { total: mb(text(hw, 'MEMORY')), swap_total: mb(text(hw, 'SWAP')) };

  const disks = list(content, 'DRIVES').filter((d) => !NOT_DISKS.has(text(d, 'FILESYSTEM')?.toLowerCase() ?? '')).map((d) => ({
    device: text(d, 'VOLUMN') ?? null,
    mount: text(d, 'TYPE') ?? null,
    fstype: text(d, 'FILESYSTEM') ?? null,
    size: mb(text(d, 'TOTAL')) ?? null,
    free: mb(text(d, 'FREE')) ?? null,
  }));

  // One OCS NETWORKS entry per address; Capstan lists interfaces with their addresses.
  const byName = new Map<string, { name: string; mac: string | null; addresses: Array<{ family: string; address: string; cidr: string | null }> }>();
  for (const n of list(content, 'NETWORKS')) {
    const name = text(n, 'DESCRIPTION') ?? 'unknown';
    const entry = byName.get(name) ?? { name, mac: text(n, 'MACADDR') ?? null, addresses: [] };
    byName.set(name, entry);
    const v4 = text(n, 'IPADDRESS');
    if (v4) {
      const p = prefixLength(text(n, 'IPMASK'));
      entry.addresses.push({ family: 'IPv4', address: v4, cidr: p === undefined ? null : `${v4}/${p}` });
    }
    const v6 = text(n, 'IPADDRESS6');
    if (v6) {
      const p = prefixLength(text(n, 'IPMASK6'));
      entry.addresses.push({ family: 'IPv6', address: v6, cidr: p === undefined ? null : `${v6}/${p}` });
    }
  }

  const packages = list(content, 'SOFTWARES').flatMap((s) => {
    const name = text(s, 'NAME');
    if (!name) return [];
    const arch = text(s, 'ARCH');
    return [{ name, version: text(s, 'VERSION') ?? '', ...(arch && { arch }) }];
  });
  // The agent's own package: rudder-agent (Linux), "Rudder Agent (DSC)" (Windows).
  const agentPackage = packages.find((p) => /^(rudder-agent(-thin)?|Rudder Agent\b.*)$/i.test(p.name));

  const doc: InventoryDoc = {
    node_id: nodeId,
    hostname,
    certificate: normalisePem(certificate),
    agent_version: text(agent, 'AGENT_VERSION') ?? agentPackage?.version ?? text(content, 'VERSIONCLIENT') ?? 'unknown',
    policy_server: policyServer,
    os: {
      name: osName.toLowerCase(),
      version: text(os, 'VERSION') ?? '',
      kernel: text(os, 'KERNEL_VERSION') ?? text(hw, 'OSVERSION') ?? '',
      arch: text(os, 'ARCH') ?? text(cpus[0], 'ARCH') ?? '',
      ...(text(os, 'FULL_NAME') && { pretty_name: text(os, 'FULL_NAME') }),
    },
    ...(fqdn && { fqdn }),
    ...(cpuCount !== undefined && { cpus: { count: cpuCount, model: text(cpus[0], 'NAME') ?? text(hw, 'PROCESSORT') ?? null } }),
    ...(memory.total !== undefined && { memory }),
    disks,
    interfaces: [...byName.values()],
    packages,
    // Where it came from, and what RUDDER says of the agent beyond Capstan's fields.
    inventory_format: 'ocs',
    rudder: {
      agent_name: text(agent, 'AGENT_NAME') ?? null,
      policy_server_hostname: text(agent, 'POLICY_SERVER_HOSTNAME') ?? null,
      capabilities: list(rudder, 'AGENT_CAPABILITIES').flatMap((c) => {
        const v = (c as Node).AGENT_CAPABILITY;
        return (Array.isArray(v) ? v : []).filter((x): x is string => typeof x === 'string');
      }),
      server_roles: list(rudder, 'SERVER_ROLES').flatMap((c) => {
        const v = (c as Node).SERVER_ROLE;
        return (Array.isArray(v) ? v : []).filter((x): x is string => typeof x === 'string');
      }),
      ...(text(hw, 'VMSYSTEM') && { vm_system: text(hw, 'VMSYSTEM') }),
    },
  };
  const publicKey = text(agent, 'CFENGINE_KEY');
  return { doc, ...(publicKey && { publicKey: normalisePem(publicKey) }) };
}

/** PEM as the agent put it in XML (indented, trailing spaces): one block, LF lines. */
function normalisePem(pem: string): string {
  return `${pem.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0).join('\n')}\n`;
}

/** Parse and map in one step (the unit the tests exercise). */
export function readOcsInventory(bytes: Buffer, limits: OcsLimits = DEFAULT_OCS_LIMITS): OcsInventory {
  return mapOcs(parseOcsXml(bytes, limits));
}
