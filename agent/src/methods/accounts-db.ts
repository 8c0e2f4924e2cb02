/**
 * The account databases as the account methods read them: passwd(5), group(5) and shadow(5), read
 * as files, so that an audit needs no tool and sees exactly what the tools wrote. NIS/compat lines
 * (`+`, `-`) and comments are skipped; a malformed line is skipped too, never fatal.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  comment: string;
  home: string;
  shell: string;
}

export interface GroupEntry {
  name: string;
  gid: number;
  members: string[];
}

export interface AccountsDb {
  users: Map<string, PasswdEntry>;
  groups: Map<string, GroupEntry>;
  /** login → the shadow password field (a hash, with `!` in front when locked); null: unreadable. */
  shadow: Map<string, string> | null;
}

const isId = (s: string | undefined): s is string => s !== undefined && /^\d+$/.test(s);

function records(text: string, fields: number): string[][] {
  return text
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('+') && !l.startsWith('-'))
    .map((l) => l.split(':'))
    .filter((f) => f.length >= fields && f[0] !== '');
}

export function parsePasswd(text: string): Map<string, PasswdEntry> {
  const out = new Map<string, PasswdEntry>();
  for (const [name, , uid, gid, comment, home, shell] of records(text, 7)) {
    if (!isId(uid) || !isId(gid) || out.has(name!)) continue;
    out.set(name!, { name: name!, uid: Number(uid), gid: Number(gid), comment: comment!, home: home!, shell: shell! });
  }
  return out;
}

export function parseGroup(text: string): Map<string, GroupEntry> {
  const out = new Map<string, GroupEntry>();
  for (const [name, , gid, members] of records(text, 4)) {
    if (!isId(gid) || out.has(name!)) continue;
    out.set(name!, { name: name!, gid: Number(gid), members: members!.split(',').filter((m) => m !== '') });
  }
  return out;
}

export function parseShadow(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, hash] of records(text, 2)) if (!out.has(name!)) out.set(name!, hash!);
  return out;
}

/** The three files under `etc` (/etc). A missing shadow file is an empty one; an unreadable one is null. */
export async function readAccounts(etc = '/etc'): Promise<AccountsDb> {
  const [passwd, group] = await Promise.all([readFile(join(etc, 'passwd'), 'utf8'), readFile(join(etc, 'group'), 'utf8')]);
  let shadow: Map<string, string> | null;
  try {
    shadow = parseShadow(await readFile(join(etc, 'shadow'), 'utf8'));
  } catch (err) {
    shadow = (err as NodeJS.ErrnoException).code === 'ENOENT' ? new Map() : null;
  }
  return { users: parsePasswd(passwd), groups: parseGroup(group), shadow };
}

export const groupByGid = (db: AccountsDb, gid: number): GroupEntry | undefined => [...db.groups.values()].find((g) => g.gid === gid);

/** The groups that list `user` as a member (its supplementary groups), by name. */
export const memberOf = (db: AccountsDb, user: string): string[] => [...db.groups.values()].filter((g) => g.members.includes(user)).map((g) => g.name);
