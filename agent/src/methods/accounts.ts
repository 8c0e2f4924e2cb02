/**
 * Users and groups: checked by reading /etc/passwd, /etc/group and /etc/shadow (an audit runs no
 * tool), converged with the host's shadow tools (useradd, usermod, userdel, chpasswd, groupadd,
 * groupmod, groupdel, gpasswd), run without a shell. What they change is planned from the
 * databases (accounts-plan.ts), so audit, dry run and enforce describe the same change.
 */
import { cp, lchown, lstat, mkdir, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
// The registry first: the specs module below takes its helpers from it (see its header).
import type { MethodSpec } from '@capstan/shared/policy/methods';
import '@capstan/shared/policy/methods';
import { groupAbsentSpec, groupPresentSpec, userAbsentSpec, userPresentSpec } from '@capstan/shared/policy/specs/accounts';
import { readAccounts, type AccountsDb } from './accounts-db.js';
import { groupAbsentPlan, groupPlan, userAbsentPlan, userPlan, type Plan, type Step } from './accounts-plan.js';
import { tool } from './tool.js';
import { converge, unlessHidden, type Method, type MethodContext, type Outcome, type ParamsOf } from './types.js';

/** Where the account files are read: /etc (tests run the methods inside a throwaway root). */
const ETC = '/etc';

/**
 * A home directory made for an existing user whose home is gone: mode 0700, /etc/skel's files
 * copied in, everything owned by the user and its primary group (as useradd -m makes it).
 */
async function makeHome(home: string, user: string): Promise<void> {
  // After usermod -d -m the home is there, moved; it is made only when there was none to move.
  if (await stat(home).then((s) => s.isDirectory(), () => false)) return;
  const entry = (await readAccounts(ETC)).users.get(user);
  if (!entry) throw capstanError('ERR_METHOD_REFUSED', `user ${user} vanished before its home was made`);
  await mkdir(home, { recursive: true, mode: 0o700 });
  await cp('/etc/skel', home, { recursive: true, errorOnExist: false, force: false }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
  // lchown: a link copied from /etc/skel is the user's, what it points to is not.
  const own = async (path: string): Promise<void> => {
    await lchown(path, entry.uid, entry.gid);
    if ((await lstat(path)).isDirectory()) for (const name of await readdir(path)) await own(join(path, name));
  };
  await own(home);
}

async function runSteps(steps: Step[], ctx: MethodContext, secret?: string): Promise<void> {
  for (const s of steps) {
    if ('home' in s) await makeHome(s.home, s.user);
    else await tool(s.cmd, s.args, ctx, { input: s.input, secret });
  }
}

/** One account method: plan from the databases, report the plan's drift, run its steps. */
function accountMethod<P extends { name: string; show_diff?: boolean }>(
  spec: MethodSpec<P>,
  component: string,
  plan: (p: P, db: AccountsDb) => Promise<Plan> | Plan,
  /** `done`: the plan the repair ran (words are read after it). */
  words: (p: P, done: Plan | undefined) => { ok: string; repaired: string },
  secret?: (p: P) => string | undefined,
): Method<P> {
  return {
    ...spec,
    apply: async (p, ctx): Promise<Outcome[]> => {
      const now = async () => plan(p, await readAccounts(ETC));
      let done: Plan | undefined;
      return [
        await converge(
          ctx, component, p.name,
          async () => {
            const d = (await now()).drift;
            return d.length ? d.join(', ') : null;
          },
          async () => {
            done = await now();
            await runSteps(done.steps, ctx, secret?.(p));
          },
          {
            ok: words(p, undefined).ok,
            get repaired() {
              return words(p, done).repaired;
            },
          },
          unlessHidden(p, async () => `${(await now()).changes.join('\n')}\n`),
        ),
      ];
    },
  };
}

/** Whether the plan made the account rather than changed it. */
const made = (done: Plan | undefined, cmd: string) => done?.steps.some((s) => 'cmd' in s && s.cmd === cmd) === true;

const homeExists = async (db: AccountsDb, name: string) => {
  const home = db.users.get(name)?.home;
  return home === undefined || (await stat(home).then((s) => s.isDirectory(), () => false));
};

export const userPresent: Method<ParamsOf<typeof userPresentSpec>> = accountMethod(
  userPresentSpec, 'User present',
  async (p, db) => userPlan(p, db, p.manage_home ? await homeExists(db, p.name) : true),
  (p, done) => ({ ok: `user ${p.name} is as wanted`, repaired: `user ${p.name} was ${made(done, 'useradd') ? 'created' : 'updated'}` }),
  (p) => p.password_hash,
);

export const userAbsent: Method<ParamsOf<typeof userAbsentSpec>> = accountMethod(
  userAbsentSpec, 'User absent', userAbsentPlan,
  (p) => ({ ok: `user ${p.name} does not exist`, repaired: `user ${p.name} was deleted` }),
);

export const groupPresent: Method<ParamsOf<typeof groupPresentSpec>> = accountMethod(
  groupPresentSpec, 'Group present', groupPlan,
  (p, done) => ({ ok: `group ${p.name} is as wanted`, repaired: `group ${p.name} was ${made(done, 'groupadd') ? 'created' : 'updated'}` }),
);

export const groupAbsent: Method<ParamsOf<typeof groupAbsentSpec>> = accountMethod(
  groupAbsentSpec, 'Group absent', groupAbsentPlan,
  (p) => ({ ok: `group ${p.name} does not exist`, repaired: `group ${p.name} was deleted` }),
);
