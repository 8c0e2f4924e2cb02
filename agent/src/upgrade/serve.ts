/**
 * An `upgrade` job's run at the agent (`capstan-agent listen`): the upgrade itself under the run
 * lock (no timer run's package step can interleave with it), then a normal run that sends a
 * fresh inventory, so the server's view of the installed versions follows at once. The task's
 * exit code is the upgrade's; the run's summary is one more output line.
 */
import type { Logger } from '@capstan/shared/log';
import type { UpgradeRequest } from '@capstan/shared/upgrade';
import type { AgentConfig } from '../config.js';
import { acquireRunLock } from '../identity/lock.js';
import { runAgent } from '../run.js';
import { applyUpgrade } from './apply.js';

export async function runUpgrade(config: AgentConfig, log: Logger, req: UpgradeRequest, out: { line(text: string): void }): Promise<number> {
  log.info({ mode: req.mode, packages: req.packages.length }, 'upgrade requested');
  const release = await acquireRunLock(config.agent.state_dir);
  let code: number;
  try {
    code = (await applyUpgrade(req, { env: process.env, commandTimeoutMs: config.methods.command_timeout, line: (t) => out.line(t) })).exit_code;
  } finally {
    await release();
  }
  try {
    const r = await runAgent(config, log, { forceInventory: true });
    out.line(r.inventorySent ? 'inventory sent' : 'inventory not sent');
    out.line(`config ${r.configId}: sent ${r.flush.sent}, queued ${r.flush.remaining}`);
  } catch (err) {
    // The upgrade happened; the inventory goes with the next timer run.
    out.line(`inventory not sent: ${(err as Error).message}`);
  }
  log.info({ code }, 'upgrade finished');
  return code;
}
