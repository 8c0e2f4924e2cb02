/**
 * Mounts: the fstab line of a mount point (one per mount point, edited in place) and what is
 * mounted there now, read from /proc/self/mountinfo; converged with util-linux's mount and umount
 * (`mount <path>` mounts what fstab says, `mount -o remount <path>` applies its options).
 */
import { realpath, stat } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
// The registry first: the specs module below takes its helpers from it (see its header).
import '@capstan/shared/policy/methods';
import { mountAbsentSpec, mountPresentSpec, type MountParams } from '@capstan/shared/policy/specs/system';
import { fstabEntries, mountAt, optionDrift, parseMountInfo, sameEntry, setFstab, type FstabEntry, type MountInfo } from './fstab.js';
import { readText, textDiff, tool, writeText } from './tool.js';
import { converge, unlessHidden, type Method, type MethodContext, type Outcome, type ParamsOf } from './types.js';

const FSTAB = '/etc/fstab';
const MOUNTINFO = '/proc/self/mountinfo';
/** Mounts stacked on one mount point that mount_absent takes off, at most. */
const MAX_STACKED = 16;

const isBind = (options: string[]) => options.includes('bind') || options.includes('rbind');
const real = (p: string) => realpath(p).catch(() => p);

/** UUID=…, LABEL=…, PARTUUID=…, PARTLABEL=… name a device through udev's /dev/disk/by-* links. */
async function resolveDevice(device: string): Promise<string> {
  const tag = /^(UUID|LABEL|PARTUUID|PARTLABEL)=(.+)$/.exec(device);
  if (tag) return real(`/dev/disk/by-${tag[1]!.toLowerCase()}/${tag[2]!}`);
  return device.startsWith('/') ? real(device) : device;
}

/**
 * Whether `m` mounts what the directive names: a bind mount shows the bound directory itself at
 * the mount point (same device and inode); a block device is compared by its resolved path;
 * anything else (tmpfs, server:/export) by the source string. NFS asked as `nfs` may be nfs4.
 */
async function sameMount(p: MountParams, m: MountInfo): Promise<boolean> {
  if (isBind(p.options)) {
    const [a, b] = await Promise.all([stat(p.device).catch(() => null), stat(p.path).catch(() => null)]);
    return a !== null && b !== null && a.dev === b.dev && a.ino === b.ino;
  }
  if (!['auto', 'none', m.fstype].includes(p.fstype) && !(p.fstype === 'nfs' && m.fstype === 'nfs4')) return false;
  return (await resolveDevice(p.device)) === (m.source.startsWith('/') ? await real(m.source) : m.source);
}

interface MountState {
  fstab: string;
  next: string;
  mount: MountInfo | undefined;
  same: boolean;
  options: string[];
}

async function look(p: MountParams): Promise<MountState> {
  const fstab = (await readText(FSTAB)) ?? '';
  const entry: FstabEntry = { device: p.device, path: p.path, fstype: p.fstype, options: p.options, dump: p.dump, pass: p.pass };
  const mount = mountAt(parseMountInfo((await readText(MOUNTINFO)) ?? ''), p.path);
  const same = mount !== undefined && (await sameMount(p, mount));
  return { fstab, next: setFstab(fstab, p.path, entry), mount, same, options: same ? optionDrift(p.options, mount!) : [] };
}

function driftOf(p: MountParams, s: MountState): string | null {
  const drift: string[] = [];
  const lines = fstabEntries(s.fstab, p.path);
  if (lines.length === 0) drift.push(`${FSTAB} has no line for ${p.path}`);
  else if (lines.length > 1 || !sameEntry(lines[0]!, { ...lines[0]!, device: p.device, fstype: p.fstype, options: p.options, dump: p.dump, pass: p.pass })) drift.push(`${FSTAB} line for ${p.path} differs`);
  if (!s.mount) drift.push(`${p.path} is not mounted`);
  else if (!s.same) drift.push(`${s.mount.source} (${s.mount.fstype}) is mounted on ${p.path}, not ${p.device}`);
  else if (s.options.length) drift.push(`${p.path} is mounted without ${s.options.join(', ')}`);
  return drift.length ? drift.join('; ') : null;
}

/** What the repair does to the live mounts, as the diff report's last line. */
function mountAction(p: MountParams, s: MountState): string {
  if (!s.mount) return `mounted ${p.device} on ${p.path}\n`;
  if (!s.same) return `unmounted ${s.mount.source} from ${p.path}, mounted ${p.device}\n`;
  return s.options.length ? `remounted ${p.path} (${s.options.map((o) => o.replace(/ \(is .*\)$/, '')).join(',')})\n` : '';
}

async function mountPresentOutcome(p: MountParams, ctx: MethodContext): Promise<Outcome> {
  return converge(
    ctx, 'Mount present', p.path,
    async () => driftOf(p, await look(p)),
    async () => {
      // Nothing is written for a mount that cannot be made.
      if (!(await stat(p.path).catch(() => null))) throw capstanError('ERR_METHOD_REFUSED', `mount point ${p.path} does not exist (a directory_present directive before this one makes it)`);
      const s = await look(p);
      if (s.next !== s.fstab) await writeText(FSTAB, s.next);
      if (s.mount && !s.same) await tool('umount', [p.path], ctx);
      if (!s.mount || !s.same) await tool('mount', [p.path], ctx);
      else if (s.options.length) await tool('mount', ['-o', 'remount', p.path], ctx);
    },
    { ok: `${p.device} is mounted on ${p.path} as ${FSTAB} says`, repaired: `${p.path} was mounted as ${FSTAB} says` },
    unlessHidden(p, async () => {
      const s = await look(p);
      return `${await textDiff(FSTAB, s.fstab, s.next, ctx)}${mountAction(p, s)}`;
    }),
  );
}

async function mountAbsentOutcome(p: ParamsOf<typeof mountAbsentSpec>, ctx: MethodContext): Promise<Outcome> {
  const state = async () => {
    const fstab = (await readText(FSTAB)) ?? '';
    return { fstab, next: setFstab(fstab, p.path, null), mount: mountAt(parseMountInfo((await readText(MOUNTINFO)) ?? ''), p.path) };
  };
  return converge(
    ctx, 'Mount absent', p.path,
    async () => {
      const s = await state();
      const drift = [...(s.next !== s.fstab ? [`${FSTAB} has a line for ${p.path}`] : []), ...(s.mount ? [`${s.mount.source} is mounted on ${p.path}`] : [])];
      return drift.length ? drift.join('; ') : null;
    },
    async () => {
      for (let i = 0; i < MAX_STACKED && (await state()).mount; i++) await tool('umount', [p.path], ctx);
      const s = await state();
      if (s.next !== s.fstab) await writeText(FSTAB, s.next);
    },
    { ok: `nothing is mounted on ${p.path} and ${FSTAB} has no line for it`, repaired: `${p.path} was unmounted and left out of ${FSTAB}` },
    unlessHidden(p, async () => {
      const s = await state();
      return `${await textDiff(FSTAB, s.fstab, s.next, ctx)}${s.mount ? `unmounted ${s.mount.source} from ${p.path}\n` : ''}`;
    }),
  );
}

export const mountPresent: Method<MountParams> = { ...mountPresentSpec, apply: async (p, ctx) => [await mountPresentOutcome(p, ctx)] };
export const mountAbsent: Method<ParamsOf<typeof mountAbsentSpec>> = { ...mountAbsentSpec, apply: async (p, ctx) => [await mountAbsentOutcome(p, ctx)] };
