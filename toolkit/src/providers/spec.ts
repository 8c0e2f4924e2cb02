/**
 * A manager as the admin API receives it, checked into a ManagerSpec. Credentials are only ever
 * references (the SDK's default chain on the provider's host, a profile name, or names of
 * environment variables there); a body that carries what looks like a secret is refused with
 * ERR_MANAGER_SECRET, so a secret never reaches the registry or its backups.
 */
import { capstanError } from '@capstan/shared/errors';
import { parseDuration } from '@capstan/shared/config';
import { checkDiscoveryFilters, wildcard } from './filters.js';
import { MANAGER_TYPES, type CredentialsRef, type InstanceCredentialsRule, type ManagerSpec, type ManagerType } from './types.js';

export const MANAGER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** Relay ids as the relays name themselves; `server` is the server itself. */
export const PROVIDER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
export const MIN_POLL_MS = 1000;
export const MAX_POLL_MS = 86_400_000;
export const DEFAULT_POLL = '5m';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
// What a credential looks like when pasted where a reference belongs.
const LOOKS_SECRET = /^(AKIA|ASIA)[A-Z0-9]{16}$|^-----BEGIN |^ya29\.|^eyJ/;
const SECRET_KEY = /secret|password|passwd|private_?key|access_?token|session_?token|connection_?string|sas_?token|api_?key/i;
const CONTROL = /[\u0000-\u001f\u007f]/;

/** Environment variable roles each driver reads when `credentials.source` is `env`. */
export const ENV_ROLES: Record<ManagerType, { required: string[]; optional: string[] }> = {
  'aws-ec2': { required: ['access_key_id', 'secret_access_key'], optional: ['session_token'] },
  // A service principal (all three), or a token obtained elsewhere (access_token) — checked below.
  'azure-vm': { required: [], optional: ['tenant_id', 'client_id', 'client_secret', 'access_token'] },
  // An access token obtained elsewhere, or the path of a service-account key file — checked below.
  gcp: { required: [], optional: ['access_token', 'credentials_file'] },
  static: { required: [], optional: [] },
};

function bad(message: string): never {
  throw capstanError('ERR_MANAGER_INVALID', message);
}

function str(v: unknown, where: string, max = 256): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > max || CONTROL.test(v)) bad(`${where} must be a string of 1 to ${max} characters`);
  return v;
}

function obj(v: unknown, where: string, allowed: string[]): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad(`${where} must be an object`);
  const extra = Object.keys(v).filter((k) => !allowed.includes(k));
  if (extra.length > 0) bad(`${where} has unknown fields: ${extra.join(', ')}`);
  return v as Record<string, unknown>;
}

function strings(v: unknown, where: string, max: number): string[] {
  if (!Array.isArray(v) || v.length === 0 || v.length > max) bad(`${where} must be an array of 1 to ${max} strings`);
  return v.map((x, i) => str(x, `${where}[${i}]`));
}

function endpoint(v: unknown, where: string): string | undefined {
  if (v === undefined) return undefined;
  const s = str(v, where, 1024);
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    bad(`${where} must be an http(s) URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') bad(`${where} must be an http(s) URL`);
  if (u.username || u.password) throw capstanError('ERR_MANAGER_SECRET', `${where} must not carry credentials`);
  return s;
}

/** Refuse anything that looks like a secret, anywhere in the body except the env role names. */
function refuseSecrets(v: unknown, path: string): void {
  if (typeof v === 'string') {
    if (LOOKS_SECRET.test(v)) throw capstanError('ERR_MANAGER_SECRET', `${path} looks like a credential; give a reference (env variable name, profile) instead`);
    return;
  }
  if (!v || typeof v !== 'object') return;
  for (const [k, x] of Object.entries(v)) {
    const here = `${path}.${k}`;
    if (here === 'manager.credentials.vars') continue;
    // Tag names are the admin's vocabulary (a host tagged password_policy=strict), not fields.
    if (SECRET_KEY.test(k) && x !== undefined && x !== null && !path.endsWith('.tags')) {
      throw capstanError('ERR_MANAGER_SECRET', `${here}: credentials are never stored; reference them (credentials.source env/profile/default)`);
    }
    refuseSecrets(x, here);
  }
}

function credentials(v: unknown, type: ManagerType): CredentialsRef {
  if (v === undefined) return { source: 'default' };
  const c = obj(v, 'credentials', ['source', 'profile', 'vars']);
  if (c.source === 'default') {
    if (c.profile !== undefined || c.vars !== undefined) bad('credentials: source default takes no profile or vars');
    return { source: 'default' };
  }
  if (type === 'static') bad('credentials: a static manager uses none');
  if (c.source === 'profile') {
    if (type !== 'aws-ec2') bad('credentials: profiles exist for aws-ec2 only');
    return { source: 'profile', profile: str(c.profile, 'credentials.profile', 128) };
  }
  if (c.source === 'env') {
    const roles = ENV_ROLES[type];
    const vars = obj(c.vars, 'credentials.vars', [...roles.required, ...roles.optional]);
    const out: Record<string, string> = {};
    for (const [role, name] of Object.entries(vars)) {
      if (typeof name !== 'string' || !ENV_NAME.test(name) || LOOKS_SECRET.test(name)) {
        throw capstanError('ERR_MANAGER_SECRET', `credentials.vars.${role} must be the NAME of an environment variable on the provider's host, not a value`);
      }
      out[role] = name;
    }
    for (const r of roles.required) if (!out[r]) bad(`credentials.vars.${r} is required`);
    if (type === 'azure-vm' && !out.access_token && !(out.tenant_id && out.client_id && out.client_secret)) {
      bad('credentials.vars needs tenant_id, client_id and client_secret, or access_token');
    }
    if (type === 'gcp' && !out.access_token === !out.credentials_file) bad('credentials.vars needs one of access_token or credentials_file');
    return { source: 'env', vars: out };
  }
  return bad('credentials.source must be default, profile or env');
}

function instanceCredentials(v: unknown): InstanceCredentialsRule[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.length > 50) bad('instance_credentials_by_tag must be an array of at most 50 rules');
  return v.map((x, i) => {
    const r = obj(x, `instance_credentials_by_tag[${i}]`, ['key', 'value', 'credentials']);
    const value = str(r.value, `instance_credentials_by_tag[${i}].value`);
    wildcard(value);
    return { tag: { key: str(r.key, `instance_credentials_by_tag[${i}].key`), values: [value] }, credentials: str(r.credentials, `instance_credentials_by_tag[${i}].credentials`, 128) };
  });
}

function config(type: ManagerType, v: unknown): Record<string, unknown> {
  const raw = v ?? {};
  switch (type) {
    case 'aws-ec2': {
      const c = obj(raw, 'config', ['regions', 'endpoint']);
      const e = endpoint(c.endpoint, 'config.endpoint');
      return { regions: strings(c.regions, 'config.regions', 40), ...(e && { endpoint: e }) };
    }
    case 'azure-vm': {
      const c = obj(raw, 'config', ['subscription_id', 'resource_groups', 'endpoint', 'authority_host', 'ca_file']);
      const e = endpoint(c.endpoint, 'config.endpoint');
      const a = endpoint(c.authority_host, 'config.authority_host');
      return {
        subscription_id: str(c.subscription_id, 'config.subscription_id', 64),
        ...(c.resource_groups !== undefined && { resource_groups: strings(c.resource_groups, 'config.resource_groups', 100) }),
        ...(e && { endpoint: e }), ...(a && { authority_host: a }),
        ...(c.ca_file !== undefined && { ca_file: str(c.ca_file, 'config.ca_file', 4096) }),
      };
    }
    case 'gcp': {
      const c = obj(raw, 'config', ['project', 'endpoint']);
      const e = endpoint(c.endpoint, 'config.endpoint');
      return { project: str(c.project, 'config.project', 128), ...(e && { endpoint: e }) };
    }
    case 'static': {
      const c = obj(raw, 'config', ['hosts', 'file', 'region']);
      if ((c.hosts === undefined) === (c.file === undefined)) bad('config needs exactly one of hosts or file');
      const region = c.region === undefined ? 'static' : str(c.region, 'config.region', 64);
      if (c.file !== undefined) return { file: str(c.file, 'config.file', 4096), region };
      if (!Array.isArray(c.hosts) || c.hosts.length > 10_000) bad('config.hosts must be an array of at most 10000 hosts');
      const hosts = c.hosts.map((h, i) => {
        if (typeof h === 'string') return { hostname: str(h, `config.hosts[${i}]`, 253) };
        const o = obj(h, `config.hosts[${i}]`, ['hostname', 'address', 'tags']);
        const tags = o.tags === undefined ? {} : obj(o.tags, `config.hosts[${i}].tags`, Object.keys(o.tags as object));
        for (const [k, t] of Object.entries(tags)) str(t, `config.hosts[${i}].tags.${k}`);
        return { hostname: str(o.hostname, `config.hosts[${i}].hostname`, 253), ...(o.address !== undefined && { address: str(o.address, `config.hosts[${i}].address`) }), tags };
      });
      return { hosts, region };
    }
  }
}

/**
 * Check a manager body (POST, or PUT with the id from the path). Unknown fields are refused,
 * so a misspelt filter never silently discovers everything.
 */
export function checkManager(raw: unknown, pathId?: string): ManagerSpec {
  refuseSecrets(raw, 'manager');
  const b = obj(raw, 'manager', ['id', 'name', 'type', 'provider', 'poll_interval', 'filters', 'credentials', 'instance_credentials_by_tag', 'config']);
  const id = pathId ?? b.id;
  if (pathId !== undefined && b.id !== undefined && b.id !== pathId) bad('id in the body differs from the path');
  if (typeof id !== 'string' || !MANAGER_ID.test(id)) bad('id must be 1 to 64 characters [A-Za-z0-9._-]');
  if (typeof b.type !== 'string' || !(MANAGER_TYPES as readonly string[]).includes(b.type)) bad(`type must be one of ${MANAGER_TYPES.join(', ')}`);
  const type = b.type as ManagerType;
  const provider = b.provider ?? 'server';
  if (typeof provider !== 'string' || !PROVIDER_ID.test(provider)) bad('provider must be a relay id or "server"');
  const poll = parseDuration(b.poll_interval ?? DEFAULT_POLL);
  if (poll === null || poll < MIN_POLL_MS || poll > MAX_POLL_MS) bad('poll_interval must be a duration between 1s and 1d');
  return {
    id,
    name: b.name === undefined ? id : str(b.name, 'name', 255),
    type,
    provider,
    poll_interval_ms: poll,
    filters: checkDiscoveryFilters(b.filters),
    credentials: credentials(b.credentials, type),
    instance_credentials_by_tag: instanceCredentials(b.instance_credentials_by_tag),
    config: config(type, b.config),
  };
}
