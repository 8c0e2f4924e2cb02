/**
 * The files of system services: a cron.d entry, a user's authorized SSH key, a sudoers.d file
 * (checked by visudo before it is installed), a systemd unit or drop-in (daemon-reload after it
 * changed). Each writes through write.ts.
 */
import { dirname } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import {
  cronEntrySpec, parseSshPublicKey, sshAuthorizedKeySpec, sshFingerprint, sudoersFileSpec, systemdUnitFileSpec,
  type SshAuthorizedKeyParams,
} from '@capstan/shared/policy/methods';
import { splitLines } from './edit.js';
import { run, type Method, type MethodContext, type ParamsOf } from './types.js';
import { passwdEntry } from './owners.js';
import { convergeParts, dirPart, filePart } from './write.js';

const header = (method: string, name: string) => `# Managed by Capstan (${method} ${name}): changes made here are overwritten.\n`;

/** One entry per file, root's and 0644 as cron wants; environment lines sorted, so the file does not depend on key order. */
export function cronFile(p: ParamsOf<typeof cronEntrySpec>): string {
  const env = Object.keys(p.env).sort().map((k) => `${k}=${p.env[k]}\n`).join('');
  return `${header('cron_entry', p.name)}${env}${p.schedule} ${p.user} ${p.command}\n`;
}

export const cronEntry: Method<ParamsOf<typeof cronEntrySpec>> = {
  ...cronEntrySpec,
  apply: async (p, ctx) => [
    await convergeParts(
      ctx, 'Cron entry', p.name, [filePart({ path: p.path, want: () => cronFile(p), mode: 0o644, owner: 0, group: 0 }, ctx)],
      { ok: `cron entry ${p.name} is in place`, repaired: `cron entry ${p.name} was written` }, { show_diff: p.show_diff },
    ),
  ],
};

/** authorized_keys tokens: blanks separate them except inside double quotes (options' values). */
function tokens(line: string): string[] {
  return line.trim().match(/(?:"(?:[^"\\]|\\.)*"|\S)+/g) ?? [];
}

/** The key blob of an authorized_keys line, or null for blank lines and comments; '' for a line that holds no key we know. */
function lineKey(line: string): string | null {
  const t = line.trim();
  if (t === '' || t.startsWith('#')) return null;
  const tk = tokens(t);
  for (const start of [0, 1]) {
    const k = parseSshPublicKey(tk.slice(start).join(' '));
    if (k) return k.blob;
  }
  return '';
}

/**
 * The key's line once, as the directive writes it (options, type, blob, comment); `absent`
 * removes every line of that key; `exclusive` also removes every other line that is not blank, a
 * comment, or a key another present directive of the policy puts in the same file.
 */
export function editAuthorizedKeys(cur: string | null, p: SshAuthorizedKeyParams, keep: ReadonlySet<string>): string | null {
  if (cur === null && p.state === 'absent') return null;
  const k = p.key;
  const want = `${p.options ? `${p.options} ` : ''}${k.type} ${k.blob}${k.comment ? ` ${k.comment}` : ''}`;
  const lines = splitLines(cur ?? '');
  const out: string[] = [];
  let found = false;
  for (const line of lines) {
    const blob = lineKey(line);
    if (blob === k.blob) {
      if (p.state === 'present' && !found) out.push(line.replace(/\r$/, '').trim() === want ? line : want);
      found = true;
    } else if (!(p.exclusive && blob !== null && !keep.has(blob))) out.push(line);
  }
  if (p.state === 'present' && !found) out.push(want);
  const same = out.length === lines.length && out.every((l, i) => l === lines[i]);
  return same ? cur : out.length === 0 ? '' : `${out.join('\n')}\n`;
}

/** The authorized_keys file of a directive: its `path`, or the user's ~/.ssh/authorized_keys. */
async function keysFile(p: { user: string; path?: string }): Promise<string> {
  if (p.path !== undefined) return p.path;
  const home = (await passwdEntry(p.user)).home;
  if (!home.startsWith('/')) throw capstanError('ERR_ACCOUNT_UNKNOWN', `user ${p.user} has no home directory in /etc/passwd`);
  return `${home.replace(/\/+$/, '')}/.ssh/authorized_keys`;
}

/** With `exclusive`, the keys that stay: this one and every present key the policy puts in the same file. */
async function keptKeys(p: SshAuthorizedKeyParams, path: string, ctx: MethodContext): Promise<Set<string>> {
  const keep = new Set([p.key.blob]);
  for (const s of ctx.siblings ?? []) {
    if (s.method !== 'ssh_authorized_key') continue;
    try {
      const o = sshAuthorizedKeySpec.validate(s.params);
      if (o.state === 'present' && (await keysFile(o).catch(() => null)) === path) keep.add(o.key.blob);
    } catch {
      /* a sibling with bad parameters reports its own error and keeps nothing */
    }
  }
  return keep;
}

export const sshAuthorizedKey: Method<ParamsOf<typeof sshAuthorizedKeySpec>> = {
  ...sshAuthorizedKeySpec,
  apply: async (p, ctx) => {
    const key = `${p.user}: ${sshFingerprint(p.key.blob)}`;
    let path: string;
    let account: { uid: number; gid: number };
    try {
      const u = await passwdEntry(p.user);
      account = { uid: u.uid, gid: u.gid };
      path = await keysFile(p);
    } catch (err) {
      return [{ component: 'SSH authorized key', key, status: 'error', message: (err as Error).message, code: (err as { code?: string }).code }];
    }
    const keep = p.exclusive ? await keptKeys(p, path, ctx) : new Set<string>();
    const present = p.state === 'present';
    return [
      await convergeParts(
        ctx, 'SSH authorized key', key,
        [
          // sshd (StrictModes) wants the directory and file private to their user.
          ...(present ? [dirPart(dirname(path), 0o700, async () => account)] : []),
          filePart({ path, edits: true, want: (cur) => editAuthorizedKeys(cur, p, keep), mode: 0o600, owner: account.uid, group: account.gid }, ctx),
        ],
        present
          ? { ok: `${p.user} has the key`, repaired: `the key was authorized for ${p.user}` }
          : { ok: `${p.user} does not have the key`, repaired: `the key was removed for ${p.user}` },
        { show_diff: p.show_diff },
      ),
    ];
  },
};

export const sudoersFile: Method<ParamsOf<typeof sudoersFileSpec>> = {
  ...sudoersFileSpec,
  apply: async (p, ctx) => {
    // sudo refuses an included file whose last line has no newline.
    const content = p.content.endsWith('\n') ? p.content : `${p.content}\n`;
    return [
      await convergeParts(
        ctx, 'Sudoers file', p.name,
        [filePart({ path: p.path, want: () => content, mode: 0o440, owner: 0, group: 0, validate: ['visudo', '-cf', '%s'] }, ctx)],
        { ok: `${p.path} is in place`, repaired: `${p.path} was written (visudo checked it)` }, { show_diff: p.show_diff },
      ),
    ];
  },
};

/** systemd's own answer to "has this unit's file changed since it was loaded?"; null when it cannot tell. */
async function needsReload(unit: string, ctx: MethodContext): Promise<boolean | null> {
  const r = await run('systemctl', ['show', '--property=NeedDaemonReload', '--value', unit], ctx);
  const v = r.stdout.trim();
  return r.code === 0 && (v === 'yes' || v === 'no') ? v === 'yes' : null;
}

/**
 * The unit file (or drop-in), then `systemctl daemon-reload` when it changed. A reload that failed
 * is tried again on the next run: systemd's NeedDaemonReload says the file is newer than what it loaded.
 */
export const systemdUnitFile: Method<ParamsOf<typeof systemdUnitFileSpec>> = {
  ...systemdUnitFileSpec,
  apply: async (p, ctx) => {
    const key = p.dropin === undefined ? p.unit : `${p.unit}.d/${p.dropin}.conf`;
    const t = { path: p.path, want: () => p.content, mode: p.mode, owner: p.owner, group: p.group, validate: p.validate };
    return [
      await convergeParts(ctx, 'Systemd unit file', key, [filePart(t, ctx)], { ok: `${p.path} is in place and loaded`, repaired: `${p.path} was written and systemd reloaded` }, {
        show_diff: p.show_diff,
        extraDrift: async () => ((await needsReload(p.unit, ctx)) ? `systemd has not reloaded ${p.unit} since its file changed` : null),
        after: async (changed) => {
          if (!changed.some(Boolean) && !(await needsReload(p.unit, ctx))) return;
          const r = await run('systemctl', ['daemon-reload'], ctx);
          if (r.code !== 0) throw capstanError('ERR_COMMAND_FAILED', `systemctl daemon-reload failed (exit ${r.code}): ${r.stderr.trim().slice(-500)}`);
        },
      }),
    ];
  },
};
