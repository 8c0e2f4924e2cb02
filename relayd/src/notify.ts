/**
 * sd_notify through the systemd-notify package (it runs the `systemd-notify` binary, hence
 * `NotifyAccess=all` in the unit). Only under systemd (NOTIFY_SOCKET set); a missing binary or
 * a failed call is ignored: readiness reporting must never stop the relay.
 */
import notify from 'systemd-notify';

export async function sdNotify(state: { ready?: boolean; status?: string }): Promise<void> {
  if (!process.env.NOTIFY_SOCKET) return;
  try {
    await notify({ ...state, pid: process.pid });
  } catch {
    /* no systemd-notify binary, or not under systemd after all */
  }
}
