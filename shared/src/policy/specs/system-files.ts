/**
 * Parameter schemas of the methods that write the files of system services: cron.d entries, SSH
 * authorized keys, sudoers.d files, systemd units, the time zone (package repositories are in
 * ./repos.ts). Each has a `name` that gives its file's usual place and an optional `path` that
 * overrides it (tests, or hosts laid out otherwise); the place is resolved here, so the server
 * and the agent agree.
 *
 * Imported through `@capstan/shared/policy/methods` (see ./writer.ts).
 */
import { dFlag, dMap, dStr, SHOW_DIFF, WRITER_PARAMS } from '../params.js';
import { createHash } from 'node:crypto';
import { paramError, showDiff, str, type MethodSpec, type ShowDiffParam } from '../methods.js';
import { ACCOUNT_NAME, bool, line, named, one, oneOf, optLine, record, text, writerParams, type WriterParams } from './writer.js';

type P = Record<string, unknown>;

export const where = (m: string, p: P, dflt: string): string => (p.path === undefined ? dflt : str(m, p, 'path', { absolute: true }));

// cron.d: Debian's cron reads only names of letters, digits, _ and - in /etc/cron.d.
export const CRON_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const CRON_SPECIAL = ['@reboot', '@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly'];
const CRON_FIELDS = [
  { what: 'minute', min: 0, max: 59 },
  { what: 'hour', min: 0, max: 23 },
  { what: 'day of month', min: 1, max: 31 },
  { what: 'month', min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'] },
  { what: 'day of week', min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] },
];

/**
 * One of crontab(5)'s five time fields: lists of `*`, N or N-M, each with an optional /step after
 * `*` or a range. Month and weekday names stand for their numbers anywhere a number may (cron's
 * parser takes them in ranges and lists, whatever older manuals say).
 */
function cronFieldOk(s: string, f: (typeof CRON_FIELDS)[number]): boolean {
  const num = (x: string): number | null => {
    const named = f.names?.indexOf(x.toLowerCase()) ?? -1;
    if (named >= 0) return named + f.min;
    return /^\d{1,2}$/.test(x) && Number(x) >= f.min && Number(x) <= f.max ? Number(x) : null;
  };
  return s.split(',').every((item) => {
    const [range, step, extra] = item.split('/');
    if (extra !== undefined || (step !== undefined && (!/^\d{1,2}$/.test(step) || Number(step) < 1))) return false;
    if (range === '*') return true;
    const [a, b, more] = range!.split('-');
    const [x, y] = [num(a!), b === undefined ? null : num(b)];
    if (more !== undefined || x === null) return false;
    return b === undefined ? step === undefined : y !== null && y >= x;
  });
}

export function cronSchedule(m: string, p: P): string {
  const s = line(m, p, 'schedule', { max: 256 }).trim();
  if (s.startsWith('@')) {
    if (!CRON_SPECIAL.includes(s)) paramError(m, 'schedule', `must be five fields or one of ${CRON_SPECIAL.join(', ')}`);
    return s;
  }
  const fields = s.split(/\s+/);
  if (fields.length !== 5) paramError(m, 'schedule', 'must be five fields (minute hour day-of-month month day-of-week) or @daily, @hourly, …');
  fields.forEach((f, i) => {
    if (!cronFieldOk(f, CRON_FIELDS[i]!)) paramError(m, 'schedule', `has a bad ${CRON_FIELDS[i]!.what} field ${JSON.stringify(f)}`);
  });
  return fields.join(' ');
}

export interface CronEntryParams extends ShowDiffParam {
  name: string;
  path: string;
  schedule: string;
  user: string;
  command: string;
  env: Record<string, string>;
}

export const cronEntrySpec: MethodSpec<CronEntryParams> = {
  name: 'cron_entry',
  params: [dStr('name', 'The file\'s name in /etc/cron.d.', { required: true, example: 'backup' }), dStr('schedule', 'Five fields (minute hour day month weekday) or @daily, @hourly…', { required: true, example: '15 3 * * *' }), dStr('user', 'The user the command runs as.', { required: true, example: 'root' }), dStr('command', 'The command line.', { required: true, example: '/usr/local/bin/backup' }), dMap('env', 'Environment lines above the entry.', { example: { MAILTO: 'ops' } }), dStr('path', 'The cron file (default /etc/cron.d/<name>).', { example: '/etc/cron.d/backup' }), SHOW_DIFF],
  example: { name: 'backup', schedule: '15 3 * * *', user: 'root', command: '/usr/local/bin/backup' },
  validate: (p) => {
    const m = 'cron_entry';
    const name = named(m, p, 'name', CRON_NAME, '1 to 64 letters, digits, _ or - (cron ignores other names in cron.d)');
    const env = record(m, p, 'env', (k, v, at) => {
      if (!/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(k)) paramError(m, at, 'is not a variable name');
      if (typeof v !== 'string' || /[\r\n\0]/.test(v)) paramError(m, at, 'must be a string on one line');
      return v;
    }, 32) ?? {};
    return {
      name, path: where(m, p, `/etc/cron.d/${name}`), schedule: cronSchedule(m, p),
      user: named(m, p, 'user', ACCOUNT_NAME, 'a user name'), command: line(m, p, 'command'), env, ...showDiff(m, p),
    };
  },
  components: (p) => one('Cron entry', p.name),
};

/** Key types an authorized_keys line may carry (OpenSSH 8.2+; DSA is refused, as OpenSSH 9.8 does). */
export const SSH_KEY_TYPES = [
  'ssh-ed25519', 'ssh-rsa', 'ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384', 'ecdsa-sha2-nistp521',
  'sk-ssh-ed25519@openssh.com', 'sk-ecdsa-sha2-nistp256@openssh.com',
];

export interface SshPublicKey {
  type: string;
  /** The base64 key blob, as in the line. */
  blob: string;
  comment?: string;
}

/**
 * `type base64 [comment]`, the key's blob checked to be base64 whose first field (a
 * length-prefixed string) names the same type: a truncated or mistyped key is refused on save.
 */
export function parseSshPublicKey(text: string): SshPublicKey | null {
  const m = /^(\S+)[ \t]+([A-Za-z0-9+/]+={0,2})(?:[ \t]+(.*?))?[ \t]*$/.exec(text.trim());
  if (!m || !SSH_KEY_TYPES.includes(m[1]!)) return null;
  const raw = Buffer.from(m[2]!, 'base64');
  if (raw.toString('base64').replace(/=+$/, '') !== m[2]!.replace(/=+$/, '') || raw.length < 4) return null;
  const n = raw.readUInt32BE(0);
  if (n + 4 > raw.length || raw.subarray(4, 4 + n).toString('latin1') !== m[1] || raw.length <= 4 + n) return null;
  return { type: m[1]!, blob: m[2]!, ...(m[3] ? { comment: m[3] } : {}) };
}

/** `SHA256:<base64>`, as `ssh-keygen -l` prints it. */
export const sshFingerprint = (blob: string) => `SHA256:${createHash('sha256').update(Buffer.from(blob, 'base64')).digest('base64').replace(/=+$/, '')}`;

export interface SshAuthorizedKeyParams extends ShowDiffParam {
  user: string;
  key: SshPublicKey;
  options?: string;
  state: 'present' | 'absent';
  exclusive: boolean;
  /** The authorized_keys file; by default ~user/.ssh/authorized_keys. */
  path?: string;
}

/** authorized_keys options: one field, so blanks only inside double quotes, which must pair up. */
function sshOptions(m: string, p: P): string | undefined {
  const v = optLine(m, p, 'options');
  if (v === undefined) return undefined;
  const outside = v.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  if (/[\s"]/.test(outside.replace(/""/g, ''))) paramError(m, 'options', 'must be comma-separated options with blanks only inside double quotes, e.g. from="10.0.0.0/8",no-agent-forwarding');
  return v;
}

export const sshAuthorizedKeySpec: MethodSpec<SshAuthorizedKeyParams> = {
  name: 'ssh_authorized_key',
  params: [dStr('user', 'Whose authorized_keys.', { required: true, example: 'deploy' }), dStr('key', 'One public key line: type base64 [comment].', { required: true, example: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMyN8FJ0c2ZxS8nN9qv8lH2o0U1eN0pK3b7E2Pq6mWdS deploy@ci' }), dStr('state', 'present or absent.', { values: ['present', 'absent'], default: 'present' }), dFlag('exclusive', 'Remove every other key of the file.', { default: false, example: true }), dStr('options', 'authorized_keys options, comma-separated.', { example: 'no-agent-forwarding' }), dStr('path', 'The authorized_keys file (default ~user/.ssh/authorized_keys).', { example: '/home/deploy/.ssh/authorized_keys' }), SHOW_DIFF],
  example: { user: 'deploy', key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMyN8FJ0c2ZxS8nN9qv8lH2o0U1eN0pK3b7E2Pq6mWdS deploy@ci' },
  validate: (p) => {
    const m = 'ssh_authorized_key';
    const key = parseSshPublicKey(line(m, p, 'key', { max: 16 * 1024 }));
    if (!key) paramError(m, 'key', `must be one public key line: type base64 [comment], type one of ${SSH_KEY_TYPES.join(', ')}`);
    const state = oneOf(m, p, 'state', ['present', 'absent'] as const, 'present');
    const exclusive = bool(m, p, 'exclusive', false);
    if (exclusive && state === 'absent') paramError(m, 'exclusive', 'only applies to a key that is present');
    const options = sshOptions(m, p);
    return {
      user: named(m, p, 'user', ACCOUNT_NAME, 'a user name'), key, state, exclusive,
      ...(options !== undefined ? { options } : {}), ...(p.path !== undefined ? { path: str(m, p, 'path', { absolute: true }) } : {}), ...showDiff(m, p),
    };
  },
  components: (p) => one('SSH authorized key', `${p.user}: ${sshFingerprint(p.key.blob)}`),
};

/** sudo skips files in sudoers.d whose names hold a dot or end in ~: such a name would never apply. */
export const SUDOERS_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export interface SudoersFileParams extends ShowDiffParam {
  name: string;
  path: string;
  content: string;
}

export const sudoersFileSpec: MethodSpec<SudoersFileParams> = {
  name: 'sudoers_file',
  params: [dStr('name', 'The file\'s name in /etc/sudoers.d.', { required: true, example: 'deploy' }), dStr('content', 'The file\'s content, checked by visudo.', { required: true, multiline: true, example: 'deploy ALL=(root) NOPASSWD: /usr/bin/systemctl\n' }), dStr('path', 'The file (default /etc/sudoers.d/<name>).', { example: '/etc/sudoers.d/deploy' }), SHOW_DIFF],
  example: { name: 'deploy', content: 'deploy ALL=(root) NOPASSWD: /usr/bin/systemctl\n' },
  validate: (p) => {
    const m = 'sudoers_file';
    const name = named(m, p, 'name', SUDOERS_NAME, '1 to 64 letters, digits, _ or - (sudo ignores names with a dot)');
    const content = text(m, p, 'content', 1024 * 1024);
    if (content.trim() === '') paramError(m, 'content', 'must not be empty');
    return { name, path: where(m, p, `/etc/sudoers.d/${name}`), content, ...showDiff(m, p) };
  },
  components: (p) => one('Sudoers file', p.name),
};

export const UNIT_NAME = /^[A-Za-z0-9:_.\\-]+(?:@[A-Za-z0-9:_.\\-]*)?\.(?:service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$/;
const DROPIN_NAME = /^[A-Za-z0-9:_@.-]{1,200}$/;

export interface SystemdUnitFileParams extends WriterParams {
  unit: string;
  dropin?: string;
  path: string;
  content: string;
}

export const systemdUnitFileSpec: MethodSpec<SystemdUnitFileParams> = {
  name: 'systemd_unit_file',
  params: [dStr('unit', 'The unit\'s name, such as nginx.service.', { required: true, example: 'app.service' }), dStr('dropin', 'A drop-in\'s name: the file goes to <unit>.d/<dropin>.conf.', { example: 'override' }), dStr('content', 'The unit file\'s content.', { required: true, multiline: true, example: '[Service]\nExecStart=/usr/bin/app\n' }), dStr('path', 'The file (default under /etc/systemd/system).', { example: '/etc/systemd/system/app.service' }), ...WRITER_PARAMS],
  example: { unit: 'app.service', content: '[Service]\nExecStart=/usr/bin/app\n' },
  validate: (p) => {
    const m = 'systemd_unit_file';
    const unit = named(m, p, 'unit', UNIT_NAME, 'a unit name such as nginx.service or backup@.timer');
    if (unit.length > 255) paramError(m, 'unit', 'must be at most 255 characters');
    let dropin: string | undefined;
    if (p.dropin !== undefined) {
      dropin = named(m, p, 'dropin', DROPIN_NAME, 'a drop-in name (letters, digits, : _ @ . -)').replace(/\.conf$/, '');
      if (dropin === '' || dropin.startsWith('.')) paramError(m, 'dropin', 'must be a drop-in name');
    }
    const file = dropin === undefined ? unit : `${unit}.d/${dropin}.conf`;
    return { unit, ...(dropin !== undefined ? { dropin } : {}), path: where(m, p, `/etc/systemd/system/${file}`), content: text(m, p, 'content', 1024 * 1024), ...writerParams(m, p) };
  },
  components: (p) => one('Systemd unit file', p.dropin === undefined ? p.unit : `${p.unit}.d/${p.dropin}.conf`),
};

export const ZONE_NAME = /^[A-Za-z0-9_+-]{1,64}(?:\/[A-Za-z0-9_+-]{1,64}){0,3}$/;

export interface TimezoneParams extends ShowDiffParam {
  name: string;
  zoneinfo: string;
  localtime: string;
  /** Debian's /etc/timezone; absent: managed when it exists; "": not managed. */
  timezone_file?: string;
}

export const timezoneSpec: MethodSpec<TimezoneParams> = {
  name: 'timezone',
  params: [dStr('name', 'A time zone such as Europe/Paris or UTC.', { required: true, example: 'Europe/Paris' }), dStr('zoneinfo', 'Where the zone files are.', { default: '/usr/share/zoneinfo', example: '/usr/share/zoneinfo' }), dStr('localtime', 'The link to the zone file.', { default: '/etc/localtime', example: '/etc/localtime' }), dStr('timezone_file', 'The file naming the zone ("" for none).', { example: '/etc/timezone' }), SHOW_DIFF],
  example: { name: 'Europe/Paris' },
  validate: (p) => {
    const m = 'timezone';
    const name = named(m, p, 'name', ZONE_NAME, 'a time zone such as Europe/Paris or UTC');
    const zoneinfo = p.zoneinfo === undefined ? '/usr/share/zoneinfo' : str(m, p, 'zoneinfo', { absolute: true }).replace(/(.)\/+$/, '$1');
    const localtime = p.localtime === undefined ? '/etc/localtime' : str(m, p, 'localtime', { absolute: true });
    let timezone_file: string | undefined;
    if (p.timezone_file !== undefined) timezone_file = p.timezone_file === '' ? '' : str(m, p, 'timezone_file', { absolute: true });
    return { name, zoneinfo, localtime, ...(timezone_file !== undefined ? { timezone_file } : {}), ...showDiff(m, p) };
  },
  components: (p) => one('Timezone', p.name),
};

export const SYSTEM_FILE_SPECS: ReadonlyArray<MethodSpec<any>> = [cronEntrySpec, sshAuthorizedKeySpec, sudoersFileSpec, systemdUnitFileSpec, timezoneSpec];
