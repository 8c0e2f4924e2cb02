/**
 * What the account methods would do, computed from the directive and the account databases alone
 * (no tool runs here): the drift an audit reports, the lines of the change's diff report, and the
 * shadow-tool commands that converge it. The password hash only ever appears in a command's
 * standard input: never in a drift, a diff line or an argument.
 */
import { capstanError } from '@capstan/shared/errors';
import type { GroupPresentParams, UserPresentParams } from '@capstan/shared/policy/specs/accounts';
import { groupByGid, memberOf, type AccountsDb } from './accounts-db.js';

/** A command to run, or a home directory to make (for a user whose home is gone). */
export type Step = { cmd: string; args: string[]; input?: string } | { home: string; user: string };

export interface Plan {
  /** Empty when compliant. */
  drift: string[];
  /** The diff report's lines. */
  changes: string[];
  steps: Step[];
}

const refuse = (message: string) => capstanError('ERR_METHOD_REFUSED', message);
const list = (names: string[]) => names.join(', ');

/** The primary gid the directive wants (undefined: not managed), checked against the group database. */
function wantedGid(p: UserPresentParams, db: AccountsDb): number | undefined {
  if (p.group !== undefined) {
    const g = db.groups.get(p.group);
    if (!g) throw refuse(`group ${p.group} does not exist (a group_present directive before this one makes it)`);
    return g.gid;
  }
  if (p.gid !== undefined && !groupByGid(db, p.gid)) throw refuse(`no group has gid ${p.gid} (a group_present directive before this one makes it)`);
  return p.gid;
}

/**
 * The shadow field to write for the wanted hash and lock state (null: it stays), the lock to set
 * with usermod -L / -U when the field stays (null: none), and the lock change either way. A new
 * account counts as having no hash and no lock mark: useradd leaves it locked with no password
 * (`!`), which is what `locked: true` alone wants.
 */
function passwordField(p: UserPresentParams, current: string | undefined): { field: string | null; usermod: boolean | null; lock: boolean | null } {
  const cur = current ?? '';
  const curLocked = cur.startsWith('!');
  const bare = cur.replace(/^!+/, '');
  const lock = current !== undefined && p.locked !== undefined && p.locked !== curLocked ? p.locked : null;
  if (p.password_hash !== undefined && bare !== p.password_hash) return { field: `${(p.locked ?? curLocked) ? '!' : ''}${p.password_hash}`, usermod: null, lock };
  if (p.locked === false && ['', '*'].includes(p.password_hash ?? bare)) {
    throw refuse(`${p.name} has no password hash: unlocking would leave it without a password (give password_hash)`);
  }
  return { field: null, usermod: lock, lock };
}

/** `homeExists`: whether the user's current home directory exists (looked at only with manage_home). */
export function userPlan(p: UserPresentParams, db: AccountsDb, homeExists = true): Plan {
  if ((p.password_hash !== undefined || p.locked !== undefined) && db.shadow === null) throw capstanError('ERR_METHOD_REFUSED', '/etc/shadow cannot be read: password and lock are not checked (the agent runs as root)');
  const gid = wantedGid(p, db);
  for (const g of p.groups ?? []) if (!db.groups.has(g)) throw refuse(`group ${g} does not exist (a group_present directive before this one makes it)`);
  const user = db.users.get(p.name);
  const plan: Plan = { drift: [], changes: [], steps: [] };
  const pw = passwordField(p, user ? db.shadow?.get(p.name) : undefined);
  const setPassword = () => {
    if (pw.field !== null) plan.steps.push({ cmd: 'chpasswd', args: ['-e'], input: `${p.name}:${pw.field}\n` });
    if (pw.usermod !== null) plan.steps.push({ cmd: 'usermod', args: [pw.usermod ? '-L' : '-U', p.name] });
  };
  if (!user) {
    const args = [
      ...(p.uid !== undefined ? ['-u', String(p.uid)] : []), ...(gid !== undefined ? ['-g', String(gid)] : []),
      ...(p.groups?.length ? ['-G', p.groups.join(',')] : []), ...(p.shell !== undefined ? ['-s', p.shell] : []),
      ...(p.home !== undefined ? ['-d', p.home] : []), ...(p.comment !== undefined ? ['-c', p.comment] : []),
      ...(p.system ? ['-r'] : []), p.manage_home ? '-m' : '-M', p.name,
    ];
    plan.drift.push(`user ${p.name} does not exist`);
    const what = [p.uid !== undefined && `uid ${p.uid}`, p.group !== undefined ? `group ${p.group}` : gid !== undefined && `gid ${gid}`, p.groups?.length && `groups ${list(p.groups)}`, p.home && `home ${p.home}`, p.shell && `shell ${p.shell}`];
    plan.changes.push(`created user ${p.name}${what.some(Boolean) ? ` (${what.filter(Boolean).join(', ')})` : ''}${p.manage_home ? ', with its home directory' : ''}`);
    plan.steps.push({ cmd: 'useradd', args });
    if (pw.field !== null) plan.changes.push(`password set${p.locked ? ', locked' : ''}`);
    else if (p.locked) plan.changes.push('locked');
    setPassword();
    return plan;
  }
  const mod: string[] = [];
  const field = (what: string, cur: string | number, want: string | number | undefined, flag: string) => {
    if (want === undefined || cur === want) return;
    plan.drift.push(`${what} ${cur} ≠ ${want}`);
    plan.changes.push(`${what} ${cur} → ${want}`);
    mod.push(flag, String(want));
  };
  field('uid', user.uid, p.uid, '-u');
  field('gid', user.gid, gid, '-g');
  field('shell', user.shell, p.shell, '-s');
  field('home', user.home, p.home, '-d');
  if (p.home !== undefined && p.home !== user.home && p.manage_home) mod.push('-m');
  if (p.comment !== undefined && p.comment !== user.comment) {
    plan.drift.push('comment differs');
    plan.changes.push(`comment "${user.comment}" → "${p.comment}"`);
    mod.push('-c', p.comment);
  }
  if (p.groups !== undefined) {
    const have = memberOf(db, p.name);
    const missing = p.groups.filter((g) => !have.includes(g));
    const extra = p.groups_exclusive ? have.filter((g) => !p.groups!.includes(g)) : [];
    if (missing.length) plan.drift.push(`not in group${missing.length > 1 ? 's' : ''} ${list(missing)}`);
    if (extra.length) plan.drift.push(`also in group${extra.length > 1 ? 's' : ''} ${list(extra)}`);
    if (missing.length || extra.length) {
      plan.changes.push(`groups ${[...missing.map((g) => `+${g}`), ...extra.map((g) => `-${g}`)].join(' ')}`);
      mod.push(...(p.groups_exclusive ? ['-G', p.groups.join(',')] : ['-a', '-G', missing.join(',')]));
    }
  }
  if (mod.length) plan.steps.push({ cmd: 'usermod', args: [...mod, p.name] });
  if (p.manage_home && p.home !== undefined && p.home !== user.home) plan.steps.push({ home: p.home, user: p.name });
  if (p.manage_home && (p.home === undefined || p.home === user.home) && !homeExists) {
    plan.drift.push(`home ${user.home} does not exist`);
    plan.changes.push(`created home ${user.home}`);
    plan.steps.push({ home: user.home, user: p.name });
  }
  if (pw.field !== null) {
    plan.drift.push('password differs');
    plan.changes.push('password changed');
  }
  if (pw.lock !== null) {
    plan.drift.push(pw.lock ? 'account is not locked' : 'account is locked');
    plan.changes.push(pw.lock ? 'locked' : 'unlocked');
  }
  setPassword();
  return plan;
}

export function userAbsentPlan(p: { name: string; remove_home: boolean }, db: AccountsDb): Plan {
  const user = db.users.get(p.name);
  if (!user) return { drift: [], changes: [], steps: [] };
  return {
    drift: [`user ${p.name} exists`],
    changes: [`deleted user ${p.name} (uid ${user.uid})`, ...(p.remove_home ? [`removed its home ${user.home}`] : [])],
    steps: [{ cmd: 'userdel', args: [...(p.remove_home ? ['-r'] : []), p.name] }],
  };
}

export function groupPlan(p: GroupPresentParams, db: AccountsDb): Plan {
  for (const u of p.members ?? []) if (!db.users.has(u)) throw refuse(`user ${u} does not exist: it cannot be a member of ${p.name}`);
  const group = db.groups.get(p.name);
  const plan: Plan = { drift: [], changes: [], steps: [] };
  if (!group) {
    plan.drift.push(`group ${p.name} does not exist`);
    plan.changes.push(`created group ${p.name}${p.gid !== undefined ? ` (gid ${p.gid})` : ''}${p.members?.length ? ` with members ${list(p.members)}` : ''}`);
    plan.steps.push({ cmd: 'groupadd', args: [...(p.gid !== undefined ? ['-g', String(p.gid)] : []), ...(p.system ? ['-r'] : []), p.name] });
    if (p.members?.length) plan.steps.push({ cmd: 'gpasswd', args: ['-M', p.members.join(','), p.name] });
    return plan;
  }
  if (p.gid !== undefined && p.gid !== group.gid) {
    plan.drift.push(`gid ${group.gid} ≠ ${p.gid}`);
    plan.changes.push(`gid ${group.gid} → ${p.gid}`);
    plan.steps.push({ cmd: 'groupmod', args: ['-g', String(p.gid), p.name] });
  }
  if (p.members !== undefined) {
    const missing = p.members.filter((u) => !group.members.includes(u));
    const extra = p.members_exclusive ? group.members.filter((u) => !p.members!.includes(u)) : [];
    if (missing.length) plan.drift.push(`${list(missing)} not member${missing.length > 1 ? 's' : ''}`);
    if (extra.length) plan.drift.push(`${list(extra)} also member${extra.length > 1 ? 's' : ''}`);
    if (missing.length || extra.length) {
      plan.changes.push(`members ${[...missing.map((u) => `+${u}`), ...extra.map((u) => `-${u}`)].join(' ')}`);
      if (p.members_exclusive) plan.steps.push({ cmd: 'gpasswd', args: ['-M', p.members.join(','), p.name] });
      else for (const u of missing) plan.steps.push({ cmd: 'gpasswd', args: ['-a', u, p.name] });
    }
  }
  return plan;
}

export function groupAbsentPlan(p: { name: string }, db: AccountsDb): Plan {
  const group = db.groups.get(p.name);
  if (!group) return { drift: [], changes: [], steps: [] };
  const owner = [...db.users.values()].find((u) => u.gid === group.gid);
  if (owner) throw refuse(`group ${p.name} is the primary group of user ${owner.name}: it cannot be removed before that user`);
  return { drift: [`group ${p.name} exists`], changes: [`deleted group ${p.name} (gid ${group.gid})`], steps: [{ cmd: 'groupdel', args: [p.name] }] };
}
