/**
 * systemd's notify protocol beyond what the systemd-notify package says (it knows READY, STATUS
 * and MAINPID only): STOPPING=1 and WATCHDOG=1 go through the same `systemd-notify` binary, as
 * `VARIABLE=value` arguments (hence `NotifyAccess=all` in the units). Only under systemd
 * (NOTIFY_SOCKET set); a missing binary or a failed call is ignored: notifying must never stop
 * a program.
 */
import { execFile } from 'node:child_process';

type Env = Readonly<Record<string, string | undefined>>;

/** Send `assignments` (e.g. `STOPPING=1`) to systemd; resolves when sent, or when it could not be. */
export function sdAssign(env: Env, assignments: readonly string[]): Promise<void> {
  if (!env.NOTIFY_SOCKET) return Promise.resolve();
  return new Promise((resolve) => {
    execFile('systemd-notify', [`--pid=${process.pid}`, ...assignments], { timeout: 5000 }, () => resolve());
  });
}

/**
 * How often to send WATCHDOG=1: half of `WatchdogSec` (systemd passes it as WATCHDOG_USEC), as
 * sd_watchdog_enabled(3) advises. Null when the unit has no watchdog, or it is meant for another
 * process (WATCHDOG_PID).
 */
export function watchdogIntervalMs(env: Env): number | null {
  if (!env.NOTIFY_SOCKET || !env.WATCHDOG_USEC) return null;
  if (env.WATCHDOG_PID && Number(env.WATCHDOG_PID) !== process.pid) return null;
  const usec = Number(env.WATCHDOG_USEC);
  if (!Number.isFinite(usec) || usec <= 0) return null;
  return Math.max(1, Math.floor(usec / 2000));
}

/**
 * Ping systemd's watchdog at half its interval while the event loop turns: a process stuck in a
 * loop stops pinging and systemd restarts it. Returns the stop function (call it when stopping).
 */
export function startWatchdog(env: Env): () => void {
  const every = watchdogIntervalMs(env);
  if (every === null) return () => undefined;
  void sdAssign(env, ['WATCHDOG=1']);
  const timer = setInterval(() => void sdAssign(env, ['WATCHDOG=1']), every);
  timer.unref();
  return () => clearInterval(timer);
}
