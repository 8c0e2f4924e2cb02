/**
 * systemd's notify protocol for the daemons (relayd and the server): READY and STATUS through the
 * systemd-notify package (it knows READY, STATUS and MAINPID only); STOPPING=1 and WATCHDOG=1
 * through the same `systemd-notify` binary, as `VARIABLE=value` arguments (hence
 * `NotifyAccess=all` in the units); and how a started daemon stops on a signal. Only under systemd
 * (NOTIFY_SOCKET set); a missing binary or a failed call is ignored: notifying must never stop
 * a program.
 */
import { execFile } from 'node:child_process';
import type { Logger } from '@capstan/shared/log';

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

/** READY and STATUS through the systemd-notify package; a missing binary or failed call is ignored. */
export async function sdNotify(state: { ready?: boolean; status?: string }): Promise<void> {
  if (!process.env.NOTIFY_SOCKET) return;
  try {
    const { default: notify } = await import('systemd-notify');
    await notify({ ...state, pid: process.pid });
  } catch {
    // No systemd-notify binary, or not under systemd after all: a unit that waits for READY
    // times out, which says why.
  }
}

export interface DaemonRun {
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** The started daemon's address, said on stdout and in systemd's STATUS. */
  url: string;
  /** Graceful stop: what is in flight finishes. */
  close(): Promise<void>;
  /** What STATUS says while stopping (`stopping: finishing the files in flight`). */
  stoppingStatus: string;
  exit(code: number): never;
}

/**
 * A started daemon under systemd: SIGTERM and SIGINT stop it (STOPPING=1, its graceful close,
 * exit 0; a second signal exits at once with 1: the operator does not want to wait), the address
 * on stdout as one JSON line (`{"ready":true,"url":…}`, read by scripts and tests), READY=1, and
 * the watchdog pinged for as long as the event loop turns. The handlers go in first: systemd may
 * send SIGTERM as soon as it has READY=1.
 */
export async function runDaemon(d: DaemonRun): Promise<void> {
  let stopWatchdog = () => {};
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      d.log.warn({ signal }, 'stopping now');
      d.exit(1);
    }
    stopping = true;
    d.log.info({ signal }, d.stoppingStatus);
    stopWatchdog();
    // STOPPING=1: systemd shows "deactivating" while what is in flight finishes.
    const told = sdAssign(process.env, ['STOPPING=1', `STATUS=${d.stoppingStatus}`]);
    Promise.all([d.close(), told]).then(
      () => d.exit(0),
      (err: unknown) => {
        d.log.error({ err }, 'error while stopping');
        d.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // The stdout line is a contract (docs/api.md, the ready line); the log gets a record of its own.
  process.stdout.write(`${JSON.stringify({ ready: true, url: d.url })}\n`);
  d.log.info({ ready: true, url: d.url }, 'ready');
  await sdNotify({ ready: true, status: `listening on ${d.url}` });
  // WatchdogSec in the unit: pings at half its interval for as long as the event loop turns.
  if (!stopping) stopWatchdog = startWatchdog(process.env);
}
