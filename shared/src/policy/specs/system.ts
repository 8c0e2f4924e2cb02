/**
 * Parameter schemas of the methods that manage the running system: services beyond running and
 * enabled, kernel modules, mounts and the host name (the agent's side: agent/src/methods/).
 *
 * methods.ts registers these in METHOD_SPECS and this file takes its helpers from methods.ts: a
 * cycle, harmless when methods.ts is loaded first (as every program does: it is what they import
 * for validation). Import this module after `@capstan/shared/policy/methods`, never before it.
 */
import { dFlag, dList, dNum, dStr, SHOW_DIFF } from '../params.js';
import { one, optStr, paramError, serviceSpec, showDiff, str, strList, type Component, type MethodSpec, type ShowDiffParam } from '../methods.js';
import { optBool } from './accounts.js';

export const serviceStoppedSpec = serviceSpec('service_stopped', 'Service stopped');
export const serviceDisabledSpec = serviceSpec('service_disabled', 'Service disabled');
/** An action: restarts on every enforce run (meant to follow a repair, see docs/policy.md). */
export const serviceRestartedSpec = serviceSpec('service_restarted', 'Service restarted');
export const serviceReloadedSpec = serviceSpec('service_reloaded', 'Service reloaded');

/** A module name as modprobe takes it (MODULE_NAME_LEN is 56 with the NUL); `-` and `_` are one. */
const MODULE = /^[A-Za-z0-9_][A-Za-z0-9_-]{0,54}$/;

export const kernelModuleLoadedSpec: MethodSpec<{ name: string; persist: boolean } & ShowDiffParam> = {
  name: 'kernel_module_loaded',
  params: [dStr('name', 'The kernel module, as modprobe takes it.', { required: true, example: 'br_netfilter' }), dFlag('persist', 'Also loaded at boot (modules-load.d).', { default: false, example: true }), SHOW_DIFF],
  example: { name: 'br_netfilter' },
  validate: (p) => {
    const name = str('kernel_module_loaded', p, 'name');
    if (!MODULE.test(name)) paramError('kernel_module_loaded', 'name', 'is not a kernel module name (letters, digits, _ and -; 55 at most)');
    return { name, persist: optBool('kernel_module_loaded', p, 'persist') ?? false, ...showDiff('kernel_module_loaded', p) };
  },
  components: (p): Component[] => [
    { component: 'Kernel module loaded', key: p.name },
    ...(p.persist ? [{ component: 'Kernel module persistent', key: p.name }] : []),
  ],
};

/**
 * fstab(5) fields hold no blank: the agent writes space, tab and backslash as \040, \011 and
 * \134 (as the kernel and util-linux read them); a line break or other control character has no
 * escape every reader knows, so it is refused.
 */
const FSTAB_FIELD = /^[^\0-\x1f\x7f]+$/;

/** A mount point: absolute, normalised (no `.`, `..`, `//` or trailing `/`), never `/` itself. */
function mountPoint(method: string, p: Record<string, unknown>): string {
  const path = str(method, p, 'path', { absolute: true });
  if (!FSTAB_FIELD.test(path)) paramError(method, 'path', 'must not contain control characters');
  if (path === '/') paramError(method, 'path', 'must not be / (the root file system is not managed)');
  if (path.endsWith('/') || path.split('/').slice(1).some((s) => s === '' || s === '.' || s === '..')) paramError(method, 'path', 'must be a normalised absolute path (no trailing /, //, . or ..)');
  return path;
}

export interface MountParams extends ShowDiffParam {
  path: string;
  device: string;
  fstype: string;
  options: string[];
  dump: number;
  pass: number;
}

function small(method: string, p: Record<string, unknown>, field: string, max: number): number {
  const v = p[field] ?? 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) paramError(method, field, `must be an integer from 0 to ${max}`);
  return v;
}

export const mountPresentSpec: MethodSpec<MountParams> = {
  name: 'mount_present',
  params: [dStr('path', 'The mount point: an absolute path, not /.', { required: true, example: '/srv/data' }), dStr('device', 'What is mounted: a device, UUID=…, a remote share.', { required: true, example: 'UUID=0a1b2c3d' }), dStr('fstype', 'The file system type (ext4, xfs, tmpfs, nfs, none for a bind mount).', { required: true, example: 'ext4' }), dList('options', 'Mount options (a list, or one comma-separated string).', { default: ['defaults'], example: ['defaults', 'noatime'] }), dNum('dump', 'fstab dump field, 0 or 1.', { default: 0, example: 0 }), dNum('pass', 'fstab pass field, 0 to 2.', { default: 0, example: 2 }), SHOW_DIFF],
  example: { path: '/srv/data', device: 'UUID=0a1b2c3d', fstype: 'ext4' },
  validate: (p) => {
    const m = 'mount_present';
    const device = str(m, p, 'device');
    if (!FSTAB_FIELD.test(device)) paramError(m, 'device', 'must not contain control characters');
    const fstype = str(m, p, 'fstype');
    if (!/^[a-z0-9][a-z0-9_.+-]{0,31}$/.test(fstype)) paramError(m, 'fstype', 'is not a file system type (ext4, xfs, tmpfs, nfs, none for a bind mount, …)');
    let options: string[];
    if (p.options === undefined) options = ['defaults'];
    else if (typeof p.options === 'string') options = optStr(m, p, 'options')!.split(',');
    else options = strList(m, p, 'options');
    options.forEach((o, i) => {
      if (!/^[^\s,\0-\x1f\x7f]+$/.test(o)) paramError(m, typeof p.options === 'string' ? 'options' : `options[${i}]`, 'must be mount options without blanks or empty entries ("defaults,noatime")');
    });
    if (options.length === 0) paramError(m, 'options', 'must not be empty (use "defaults")');
    return { path: mountPoint(m, p), device, fstype, options, dump: small(m, p, 'dump', 1), pass: small(m, p, 'pass', 2), ...showDiff(m, p) };
  },
  components: (p) => one('Mount present', p.path),
};

export const mountAbsentSpec: MethodSpec<{ path: string } & ShowDiffParam> = {
  name: 'mount_absent',
  params: [dStr('path', 'The mount point to unmount and drop from fstab.', { required: true, example: '/mnt/old' }), SHOW_DIFF],
  example: { path: '/mnt/old' },
  validate: (p) => ({ path: mountPoint('mount_absent', p), ...showDiff('mount_absent', p) }),
  components: (p) => one('Mount absent', p.path),
};

/**
 * RFC 1123 host names, lower case (they compare without case, and hostnamectl lowers them):
 * dot-separated labels of 1-63 letters, digits and inner hyphens; 64 characters at most, the
 * kernel's limit for the live name (HOST_NAME_MAX).
 */
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export const hostnameSpec: MethodSpec<{ name: string } & ShowDiffParam> = {
  name: 'hostname',
  params: [dStr('name', 'The host name: RFC 1123, lower case, 64 characters at most.', { required: true, example: 'web-1.example.org' }), SHOW_DIFF],
  example: { name: 'web-1.example.org' },
  validate: (p) => {
    const name = str('hostname', p, 'name');
    if (name.length > 64) paramError('hostname', 'name', 'must be at most 64 characters (the kernel\'s limit)');
    if (!name.split('.').every((l) => LABEL.test(l))) paramError('hostname', 'name', 'is not an RFC 1123 host name in lower case (labels of a-z, 0-9 and inner -, joined by .)');
    return { name, ...showDiff('hostname', p) };
  },
  components: (p) => one('Hostname', p.name),
};

export const SYSTEM_SPECS = [
  serviceStoppedSpec, serviceDisabledSpec, serviceRestartedSpec, serviceReloadedSpec, kernelModuleLoadedSpec, mountPresentSpec, mountAbsentSpec, hostnameSpec,
] as const;
