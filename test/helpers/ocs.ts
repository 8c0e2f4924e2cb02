/**
 * RUDDER agent stand-ins for tests: a node key and self-signed certificate made with the OpenSSL
 * command line (subject `UID=<node id>`, as RUDDER agents make theirs), OCS inventories built
 * here as XML, and their `.sign` files made the way RUDDER's signing script makes them:
 * `openssl dgst -sha512 -hex -sign <key>` over the uncompressed XML.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface RudderNode {
  id: string;
  keyPem: string;
  certPem: string;
  /** The key's public half as `BEGIN RSA PUBLIC KEY` (RUDDER's CFENGINE_KEY). */
  publicPem: string;
}

function openssl(args: string[], input?: Buffer): Buffer {
  return execFileSync('openssl', args, { input, stdio: ['pipe', 'pipe', 'pipe'] });
}

function withDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-ocs-'));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function rudderNode(id: string, bits = 2048): RudderNode {
  return withDir((dir) => {
    const key = join(dir, 'localhost.priv');
    const cert = join(dir, 'agent.cert');
    openssl(['req', '-x509', '-newkey', `rsa:${bits}`, '-nodes', '-keyout', key, '-out', cert, '-subj', `/UID=${id}`, '-days', '3650', '-sha256']);
    const publicPem = openssl(['rsa', '-in', key, '-RSAPublicKey_out']).toString();
    return { id, keyPem: readFileSync(key, 'utf8'), certPem: readFileSync(cert, 'utf8'), publicPem };
  });
}

/** The `.sign` file RUDDER's signing script writes for `data` (hash_value only when asked). */
export function signOcs(data: Buffer, node: RudderNode, opts: { hashValue?: boolean; hostname?: string } = {}): Buffer {
  return withDir((dir) => {
    const key = join(dir, 'localhost.priv');
    writeFileSync(key, node.keyPem, { mode: 0o600 });
    const out = openssl(['dgst', '-sha512', '-hex', '-sign', key], data).toString();
    const digest = out.trim().replace(/^.*= /, '');
    const hash = openssl(['dgst', '-sha512'], data).toString().trim().replace(/^.*= /, '');
    const lines = ['header=rudder-signature-v1', 'algorithm=sha512', `digest=${digest}`];
    if (opts.hashValue) lines.push(`hash_value=${hash}`);
    lines.push(`hostname=${opts.hostname ?? 'node'}`, 'keydate=2026-11-25 10:00:00.000000000 +0000', 'keyid=ABCDEF01');
    return Buffer.from(`${lines.join('\n')}\n`);
  });
}

/** Clear-signed S/MIME as RUDDER agents sign their run logs: `openssl smime -sign -text -nocerts -md sha256`. */
export function smimeSignOpenssl(data: Buffer, node: RudderNode): Buffer {
  return withDir((dir) => {
    writeFileSync(join(dir, 'k'), node.keyPem, { mode: 0o600 });
    writeFileSync(join(dir, 'c'), node.certPem);
    return openssl(['smime', '-sign', '-text', '-nocerts', '-md', 'sha256', '-signer', join(dir, 'c'), '-inkey', join(dir, 'k')], data);
  });
}

export interface OcsOptions {
  hostname?: string;
  policyServer?: string;
  /** Certificate put in AGENT_CERT (default the node's). */
  certPem?: string;
  /** CFENGINE_KEY (default the node's; null: none). */
  publicPem?: string | null;
  packages?: Array<{ name: string; version: string; arch?: string }>;
  /** Leave out a section or field by its element name (e.g. UUID). */
  omit?: string[];
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** An OCS inventory like a RUDDER 8 agent's (FusionInventory 2.6), built here. */
export function ocsXml(node: RudderNode, o: OcsOptions = {}): Buffer {
  const host = o.hostname ?? 'web1';
  const el = (name: string, body: string) => (o.omit?.includes(name) ? '' : `<${name}>${body}</${name}>`);
  const packages = o.packages ?? [
    { name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64' },
    { name: 'rudder-agent', version: '8.3.4-debian12', arch: 'amd64' },
    { name: 'libc6', version: '2.36-9+deb12u4', arch: 'amd64' },
  ];
  const xml = `<?xml version="1.0" encoding="UTF-8" ?>
<REQUEST>
  <CONTENT>
    ${el('CPUS', '<ARCH>x86_64</ARCH><CORE>2</CORE><NAME>AMD EPYC 7B13</NAME><THREAD>2</THREAD>')}
    <DRIVES><FILESYSTEM>ext4</FILESYSTEM><FREE>17527</FREE><TOTAL>19985</TOTAL><TYPE>/</TYPE><VOLUMN>/dev/sda1</VOLUMN></DRIVES>
    <DRIVES><FILESYSTEM>tmpfs</FILESYSTEM><FREE>4</FREE><TOTAL>4</TOTAL><TYPE>/dev/shm</TYPE><VOLUMN>tmpfs</VOLUMN></DRIVES>
    <DRIVES><FILESYSTEM>xfs</FILESYSTEM><FREE>1000</FREE><TOTAL>2000</TOTAL><TYPE>/srv</TYPE><VOLUMN>/dev/sdb1</VOLUMN></DRIVES>
    <HARDWARE>
      <MEMORY>3942</MEMORY><SWAP>1023</SWAP>
      ${el('NAME', host)}
      <OSNAME>Debian GNU/Linux 12 (bookworm)</OSNAME><OSVERSION>6.1.0-13-amd64</OSVERSION>
      <PROCESSORN>1</PROCESSORN><VMSYSTEM>KVM</VMSYSTEM>
    </HARDWARE>
    <NETWORKS><DESCRIPTION>lo</DESCRIPTION><IPADDRESS>127.0.0.1</IPADDRESS><IPMASK>255.0.0.0</IPMASK><MACADDR>00:00:00:00:00:00</MACADDR></NETWORKS>
    <NETWORKS><DESCRIPTION>eth0</DESCRIPTION><IPADDRESS>192.0.2.10</IPADDRESS><IPMASK>255.255.255.0</IPMASK><MACADDR>52:54:00:12:34:56</MACADDR></NETWORKS>
    <NETWORKS><DESCRIPTION>eth0</DESCRIPTION><IPADDRESS6>2001:db8::10</IPADDRESS6><IPMASK6>64</IPMASK6><MACADDR>52:54:00:12:34:56</MACADDR></NETWORKS>
    ${el('OPERATINGSYSTEM', `<ARCH>x86_64</ARCH><FQDN>${host}.example.test</FQDN><FULL_NAME>Debian GNU/Linux 12 (bookworm)</FULL_NAME>
      <KERNEL_NAME>linux</KERNEL_NAME><KERNEL_VERSION>6.1.0-13-amd64</KERNEL_VERSION><NAME>Debian</NAME>
      <TIMEZONE><NAME>UTC</NAME><OFFSET>+0000</OFFSET></TIMEZONE><VERSION>12</VERSION>`)}
    <RUDDER>
      <AGENT>
        ${el('AGENT_CERT', esc(o.certPem ?? node.certPem))}
        <AGENT_NAME>cfengine-community</AGENT_NAME>
        ${o.publicPem === null ? '' : el('CFENGINE_KEY', esc(o.publicPem ?? node.publicPem))}
        <OWNER>root</OWNER>
        <POLICY_SERVER_HOSTNAME>server.example.test</POLICY_SERVER_HOSTNAME>
        ${el('POLICY_SERVER_UUID', o.policyServer ?? 'root')}
      </AGENT>
      <AGENT_CAPABILITIES><AGENT_CAPABILITY>cfengine</AGENT_CAPABILITY><AGENT_CAPABILITY>http_reporting</AGENT_CAPABILITY></AGENT_CAPABILITIES>
      <HOSTNAME>${host}.example.test</HOSTNAME>
      <SERVER_ROLES></SERVER_ROLES>
      ${el('UUID', node.id)}
    </RUDDER>
    ${packages.map((p) => `<SOFTWARES>${p.arch ? `<ARCH>${p.arch}</ARCH>` : ''}<FROM>deb</FROM><NAME>${esc(p.name)}</NAME><VERSION>${esc(p.version)}</VERSION></SOFTWARES>`).join('\n    ')}
    <VERSIONCLIENT>FusionInventory-Agent_v2.6</VERSIONCLIENT>
  </CONTENT>
  <DEVICEID>${host}-2026-11-25-10-00-00</DEVICEID>
  <QUERY>INVENTORY</QUERY>
</REQUEST>
`;
  return Buffer.from(xml);
}

/** RUDDER's inventory file name: `<uuid>_<date --utc --iso-8601=seconds>.ocs`. */
export function ocsName(id: string, at = new Date()): string {
  return `${id}_${at.toISOString().replace(/\.\d{3}Z$/, '+00:00')}.ocs`;
}
