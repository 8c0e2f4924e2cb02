/**
 * Services through systemctl: states (running, stopped, enabled, disabled), checked and converged
 * like every method, and actions (restarted, reloaded), which have no state to check: they act on
 * every enforce run, and are meant to follow a repair (docs/policy.md, Services).
 */
import { capstanError } from '@capstan/shared/errors';
import { serviceEnabledSpec, serviceRunningSpec } from '@capstan/shared/policy/methods';
import { serviceDisabledSpec, serviceReloadedSpec, serviceRestartedSpec, serviceStoppedSpec } from '@capstan/shared/policy/specs/system';
import { run, converge, type Method, type MethodContext, type Outcome } from './types.js';
import { tool } from './tool.js';

/** `systemctl is-enabled` states that `systemctl disable` undoes (static, indirect, masked… are left alone). */
const ENABLED_STATES = new Set(['enabled', 'enabled-runtime']);

interface StateMethod {
  spec: typeof serviceRunningSpec;
  component: string;
  /** Null when the unit is as wanted, else the drift. */
  check: (unit: string, ctx: MethodContext) => Promise<string | null>;
  /** The systemctl arguments that converge it (the unit is appended). */
  repair: (unit: string, ctx: MethodContext) => Promise<string[]>;
  ok: string;
  repaired: string;
}

const active = async (unit: string, ctx: MethodContext) => (await run('systemctl', ['is-active', '--quiet', unit], ctx)).code === 0;

/** `systemctl is-enabled` prints the unit file's state; a unit without one answers on stderr. */
async function enablement(unit: string, ctx: MethodContext): Promise<string> {
  const r = await run('systemctl', ['is-enabled', unit], ctx);
  if (r.code === 127 && r.stdout === '') throw capstanError('ERR_METHOD_TOOL', `systemctl could not run: ${r.stderr}`);
  return r.stdout.trim().split('\n')[0] || 'not-found';
}

function stateMethod(m: StateMethod): Method<{ name: string }> {
  return {
    ...m.spec,
    apply: async (p, ctx) => [
      await converge(
        ctx, m.component, p.name,
        () => m.check(p.name, ctx),
        async () => {
          await tool('systemctl', [...(await m.repair(p.name, ctx)), p.name], ctx);
        },
        { ok: `${p.name} ${m.ok}`, repaired: `${p.name} ${m.repaired}` },
      ),
    ],
  };
}

export const serviceRunning = stateMethod({
  spec: serviceRunningSpec, component: 'Service running', ok: 'is running', repaired: 'was started',
  check: async (u, ctx) => ((await active(u, ctx)) ? null : `${u} is not running`),
  repair: async () => ['start'],
});

export const serviceStopped = stateMethod({
  spec: serviceStoppedSpec, component: 'Service stopped', ok: 'is not running', repaired: 'was stopped',
  check: async (u, ctx) => ((await active(u, ctx)) ? `${u} is running` : null),
  repair: async () => ['stop'],
});

export const serviceEnabled = stateMethod({
  spec: serviceEnabledSpec, component: 'Service enabled', ok: 'is enabled', repaired: 'was enabled',
  check: async (u, ctx) => ((await run('systemctl', ['is-enabled', '--quiet', u], ctx)).code === 0 ? null : `${u} is not enabled`),
  repair: async () => ['enable'],
});

export const serviceDisabled = stateMethod({
  spec: serviceDisabledSpec, component: 'Service disabled', ok: 'is not enabled', repaired: 'was disabled',
  check: async (u, ctx) => {
    const state = await enablement(u, ctx);
    return ENABLED_STATES.has(state) ? `${u} is ${state}` : null;
  },
  // Enabled for this boot only (/run): only `disable --runtime` undoes that.
  repair: async (u, ctx) => ((await enablement(u, ctx)) === 'enabled-runtime' ? ['disable', '--runtime'] : ['disable']),
});

/**
 * An action: in audit mode there is nothing to compare (`na`); a dry run says it would act;
 * enforce acts, `repaired` when systemctl succeeded (and, for a restart, the unit is active).
 */
function actionMethod(spec: typeof serviceRestartedSpec, verb: 'restart' | 'reload', component: string, done: string): Method<{ name: string }> {
  return {
    ...spec,
    apply: async (p, ctx): Promise<Outcome[]> => {
      const out = (status: Outcome['status'], message: string): Outcome[] => [{ component, key: p.name, status, message }];
      if (ctx.mode === 'audit') return out('na', `${verb} is an action: nothing to audit`);
      if (ctx.dryRun) return out('noncompliant', `would repair: ${verb} ${p.name}`);
      try {
        await tool('systemctl', [verb, p.name], ctx);
        if (verb === 'restart' && !(await active(p.name, ctx))) return out('error', `${p.name} was restarted but is not running`);
        return out('repaired', `${p.name} ${done}`);
      } catch (err) {
        return out('error', (err as Error).message);
      }
    },
  };
}

export const serviceRestarted = actionMethod(serviceRestartedSpec, 'restart', 'Service restarted', 'was restarted');
export const serviceReloaded = actionMethod(serviceReloadedSpec, 'reload', 'Service reloaded', 'was reloaded');
