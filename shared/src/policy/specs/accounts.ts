/**
 * Parameter schemas of the account methods: users and groups as the shadow tools (useradd,
 * usermod, groupadd, gpasswd) manage them. Shared so the server refuses a bad directive on save
 * with exactly the agent's rules (shared/src/policy/methods.ts explains the pattern).
 *
 * methods.ts registers these in METHOD_SPECS and this file takes its helpers from methods.ts: a
 * cycle, harmless when methods.ts is loaded first (as every program does: it is what they import
 * for validation). Import this module after `@capstan/shared/policy/methods`, never before it.
 */
import { dFlag, dList, dNum, dStr, SHOW_DIFF } from '../params.js';
import { one, optStr, paramError, showDiff, str, strList, type MethodSpec, type ShowDiffParam } from '../methods.js';

/**
 * A user or group name the shadow tools of every distribution accept: a letter or `_` first, then
 * letters, digits, `_`, `.`, `-`, an optional final `$` (Samba machine accounts), 32 characters
 * at most (LOGIN_NAME_MAX). Nothing that could pass for an option, a number or a passwd field.
 */
export const ACCOUNT_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,30}[A-Za-z0-9_.$-]?$/;

/** uid_t / gid_t, without (uid_t)-1, which means "no change" to the kernel. */
export const MAX_ID = 4294967294;

/**
 * A crypt(5) hash: `$id$[params$]salt$hash` (yescrypt `$y$`, SHA-512 `$6$`, bcrypt `$2b$`, …).
 * A lock mark (`!`) is not part of it: `locked` says that.
 */
const CRYPT_HASH = /^\$[0-9a-z]{1,8}\$[A-Za-z0-9./=,$+-]{1,1000}$/;

/** passwd(5) text fields (comment, home, shell) cannot hold `:` or a line break. */
const PASSWD_FIELD = /^[^:\n\r\0]*$/;

export function accountName(method: string, p: Record<string, unknown>, field: string): string {
  const v = str(method, p, field);
  if (!ACCOUNT_NAME.test(v)) paramError(method, field, 'is not a user or group name (a letter or _, then letters, digits, _ . -; 32 characters at most)');
  return v;
}

export function optBool(method: string, p: Record<string, unknown>, field: string): boolean | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') paramError(method, field, 'must be true or false');
  return v;
}

function accountId(method: string, p: Record<string, unknown>, field: string): number | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_ID) paramError(method, field, `must be a numeric id from 0 to ${MAX_ID}`);
  return v;
}

function nameList(method: string, p: Record<string, unknown>, field: string): string[] | undefined {
  if (p[field] === undefined) return undefined;
  const list = strList(method, p, field);
  list.forEach((n, i) => {
    if (!ACCOUNT_NAME.test(n)) paramError(method, `${field}[${i}]`, 'is not a user or group name');
  });
  return [...new Set(list)];
}

function passwdField(method: string, p: Record<string, unknown>, field: string, absolute: boolean): string | undefined {
  const v = absolute ? optStr(method, p, field, { absolute: true }) : (p[field] === undefined ? undefined : p[field]);
  if (v === undefined) return undefined;
  if (typeof v !== 'string') paramError(method, field, 'must be a string');
  if (!PASSWD_FIELD.test(v)) paramError(method, field, 'must not contain ":" or a line break');
  if (v.length > 1024) paramError(method, field, 'must be at most 1024 characters');
  return v;
}

export interface UserPresentParams extends ShowDiffParam {
  name: string;
  uid?: number;
  /** The primary group by number, or by name (`group`); at most one of the two. */
  gid?: number;
  group?: string;
  /** Supplementary groups; with `groups_exclusive`, exactly these. */
  groups?: string[];
  groups_exclusive: boolean;
  shell?: string;
  home?: string;
  manage_home: boolean;
  comment?: string;
  /** A crypt hash: a secret, never written in a message, a diff or a log line. */
  password_hash?: string;
  locked?: boolean;
  system: boolean;
}

export const userPresentSpec: MethodSpec<UserPresentParams> = {
  name: 'user_present',
  params: [dStr('name', 'The user name.', { required: true, example: 'deploy' }), dNum('uid', 'Its numeric id (default: the next free one).', { example: 1500 }), dNum('gid', 'Its primary group by number (gid or group).', { example: 1500 }), dStr('group', 'Its primary group by name (gid or group).', { example: 'deploy' }), dList('groups', 'Supplementary groups.', { example: ['adm'] }), dFlag('groups_exclusive', 'Exactly these supplementary groups (others are left); needs groups.', { default: false, example: false }), dStr('shell', 'Its login shell: an absolute path.', { example: '/bin/bash' }), dStr('home', 'Its home directory: an absolute path.', { example: '/home/deploy' }), dFlag('manage_home', 'Create (and move) the home directory.', { default: false, example: true }), dStr('comment', 'The GECOS comment.', { example: 'Deployments' }), dStr('password_hash', 'A crypt(5) hash ($y$…, $6$…): a secret, never shown in a report.', { example: '$6$salt$hash' }), dFlag('locked', 'The password is locked (absent: left as it is).', { example: true }), dFlag('system', 'A system account (a uid below UID_MIN) when created.', { default: false }), SHOW_DIFF],
  example: { name: 'deploy' },
  validate: (p) => {
    const m = 'user_present';
    const out: UserPresentParams = {
      name: accountName(m, p, 'name'),
      uid: accountId(m, p, 'uid'),
      gid: accountId(m, p, 'gid'),
      group: p.group === undefined ? undefined : accountName(m, p, 'group'),
      groups: nameList(m, p, 'groups'),
      groups_exclusive: optBool(m, p, 'groups_exclusive') ?? false,
      shell: passwdField(m, p, 'shell', true),
      home: passwdField(m, p, 'home', true),
      manage_home: optBool(m, p, 'manage_home') ?? false,
      comment: passwdField(m, p, 'comment', false),
      locked: optBool(m, p, 'locked'),
      system: optBool(m, p, 'system') ?? false,
      ...showDiff(m, p),
    };
    if (out.gid !== undefined && out.group !== undefined) paramError(m, 'group', 'cannot be given with gid (both name the primary group)');
    if (out.groups_exclusive && out.groups === undefined) paramError(m, 'groups', 'is required with groups_exclusive');
    if (p.password_hash !== undefined) {
      // The value is never repeated, in an error either.
      if (typeof p.password_hash !== 'string' || !CRYPT_HASH.test(p.password_hash)) {
        paramError(m, 'password_hash', 'must be a crypt(5) hash such as $y$… or $6$… (lock the account with locked: true)');
      }
      out.password_hash = p.password_hash;
    }
    return out;
  },
  components: (p) => one('User present', p.name),
};

export const userAbsentSpec: MethodSpec<{ name: string; remove_home: boolean } & ShowDiffParam> = {
  name: 'user_absent',
  params: [dStr('name', 'The user name.', { required: true, example: 'olduser' }), dFlag('remove_home', 'Remove its home directory too.', { default: false }), SHOW_DIFF],
  example: { name: 'olduser' },
  validate: (p) => ({ name: accountName('user_absent', p, 'name'), remove_home: optBool('user_absent', p, 'remove_home') ?? false, ...showDiff('user_absent', p) }),
  components: (p) => one('User absent', p.name),
};

export interface GroupPresentParams extends ShowDiffParam {
  name: string;
  gid?: number;
  system: boolean;
  /** Users listed in the group (/etc/group); with `members_exclusive`, exactly these. */
  members?: string[];
  members_exclusive: boolean;
}

export const groupPresentSpec: MethodSpec<GroupPresentParams> = {
  name: 'group_present',
  params: [dStr('name', 'The group name.', { required: true, example: 'deploy' }), dNum('gid', 'Its numeric id (default: the next free one).', { example: 1500 }), dFlag('system', 'A system group when created.', { default: false }), dList('members', 'Users listed in it (/etc/group).', { example: ['deploy'] }), dFlag('members_exclusive', 'Exactly these members; needs members.', { default: false, example: false }), SHOW_DIFF],
  example: { name: 'deploy' },
  validate: (p) => {
    const m = 'group_present';
    const out: GroupPresentParams = {
      name: accountName(m, p, 'name'),
      gid: accountId(m, p, 'gid'),
      system: optBool(m, p, 'system') ?? false,
      members: nameList(m, p, 'members'),
      members_exclusive: optBool(m, p, 'members_exclusive') ?? false,
      ...showDiff(m, p),
    };
    if (out.members_exclusive && out.members === undefined) paramError(m, 'members', 'is required with members_exclusive');
    return out;
  },
  components: (p) => one('Group present', p.name),
};

export const groupAbsentSpec: MethodSpec<{ name: string } & ShowDiffParam> = {
  name: 'group_absent',
  params: [dStr('name', 'The group name.', { required: true, example: 'oldgroup' }), SHOW_DIFF],
  example: { name: 'oldgroup' },
  validate: (p) => ({ name: accountName('group_absent', p, 'name'), ...showDiff('group_absent', p) }),
  components: (p) => one('Group absent', p.name),
};

export const ACCOUNT_SPECS = [userPresentSpec, userAbsentSpec, groupPresentSpec, groupAbsentSpec] as const;
