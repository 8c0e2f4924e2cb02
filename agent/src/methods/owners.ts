/**
 * Users and groups as the node knows them: names looked up in /etc/passwd and /etc/group (an
 * unknown name is ERR_ACCOUNT_UNKNOWN, never a guess), numeric ids taken as they are.
 */
import { readFile } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
import type { Account } from '@capstan/shared/policy/methods';

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** `name:x:uid:gid:gecos:home:shell` lines of passwd(5) (group(5) lines have the id in the same column). */
async function accountLines(file: string): Promise<string[][]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(':'));
}

export async function passwdEntry(user: string): Promise<PasswdEntry> {
  const f = (await accountLines('/etc/passwd')).find((x) => x[0] === user && /^\d+$/.test(x[2] ?? '') && /^\d+$/.test(x[3] ?? ''));
  if (!f) throw capstanError('ERR_ACCOUNT_UNKNOWN', `user ${user} is not in /etc/passwd`);
  return { name: user, uid: Number(f[2]), gid: Number(f[3]), home: f[5] ?? '' };
}

/** A uid: a number is one already; a name is looked up in /etc/passwd. */
export async function resolveUid(a: Account): Promise<number> {
  return typeof a === 'number' ? a : (await passwdEntry(a)).uid;
}

export async function resolveGid(a: Account): Promise<number> {
  if (typeof a === 'number') return a;
  const f = (await accountLines('/etc/group')).find((x) => x[0] === a && /^\d+$/.test(x[2] ?? ''));
  if (!f) throw capstanError('ERR_ACCOUNT_UNKNOWN', `group ${a} is not in /etc/group`);
  return Number(f[2]);
}
