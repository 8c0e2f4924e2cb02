/**
 * Parameter schemas of the package-repository methods: an APT source (deb822) with its key, a
 * YUM/DNF .repo file with its key. Like ./system-files.ts, `name` gives the files' usual places
 * and `path` (and `signed_by`, `key_path`) override them.
 *
 * Imported through `@capstan/shared/policy/methods` (see ./writer.ts).
 */
import { dFlag, dList, dMap, dNum, dStr, SHOW_DIFF } from '../params.js';
import { paramError, showDiff, str, strList, type MethodSpec, type ShowDiffParam } from '../methods.js';
import { where } from './system-files.js';
import { bool, named, one, optLine, pgpPublicKey, record } from './writer.js';

type P = Record<string, unknown>;

export const REPO_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$/;
const URI = /^[a-z][a-z0-9+.-]*:\S+$/;

function list(m: string, p: P, field: string, re: RegExp, what: string, opts: { required?: boolean; single?: boolean } = {}): string[] {
  const v = opts.single && typeof p[field] === 'string' ? [p[field]] : p[field];
  const items = strList(m, { [field]: v }, field);
  if (opts.required && items.length === 0) paramError(m, field, `must list at least one ${what}`);
  if (items.length > 64) paramError(m, field, 'must have at most 64 entries');
  const bad = items.findIndex((x) => !re.test(x));
  if (bad >= 0) paramError(m, `${field}.${bad}`, `must be ${what}`);
  return items;
}

export interface AptRepositoryParams extends ShowDiffParam {
  name: string;
  path: string;
  types: string[];
  uris: string[];
  suites: string[];
  components: string[];
  architectures: string[];
  /** The repository's signing key (armored), written to signed_by. */
  key?: string;
  signed_by: string;
  enabled: boolean;
  update: boolean;
}

export const aptRepositorySpec: MethodSpec<AptRepositoryParams> = {
  name: 'apt_repository',
  params: [dStr('name', 'The .sources file\'s name.', { required: true, example: 'nginx' }), dList('types', 'deb and/or deb-src.', { default: ['deb'], example: ['deb'] }), dList('uris', 'The repository\'s URIs.', { required: true, example: ['https://deb.example.org/debian'] }), dList('suites', 'Suites such as bookworm.', { required: true, example: ['bookworm'] }), dList('components', 'Components such as main (required unless a suite is an exact path ending in /).', { example: ['main'] }), dList('architectures', 'Architectures such as amd64.', { example: ['amd64'] }), dStr('key', 'The repository\'s ASCII-armored public key (key or signed_by).', { multiline: true }), dStr('signed_by', 'A keyring file already on the node (key or signed_by).', { example: '/usr/share/keyrings/nginx.gpg' }), dFlag('enabled', 'The repository is used.', { default: true }), dFlag('update', 'Refresh the package lists after a change.', { default: true }), dStr('path', 'The .sources file (default under /etc/apt/sources.list.d).', { example: '/etc/apt/sources.list.d/nginx.sources' }), SHOW_DIFF],
  example: { name: 'nginx', uris: ['https://deb.example.org/debian'], suites: ['bookworm'], components: ['main'], signed_by: '/usr/share/keyrings/nginx.gpg' },
  validate: (p) => {
    const m = 'apt_repository';
    const name = named(m, p, 'name', /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/, 'a file name of letters, digits, _ . -');
    const types = p.types === undefined ? ['deb'] : list(m, p, 'types', /^deb(?:-src)?$/, 'deb or deb-src', { required: true });
    const uris = list(m, p, 'uris', URI, 'a URI such as https://deb.example.org/debian', { required: true, single: true });
    const suites = list(m, p, 'suites', /^[^\s#]+$/, 'a suite such as bookworm (or an exact path ending in /)', { required: true, single: true });
    const components = list(m, p, 'components', /^[A-Za-z0-9][A-Za-z0-9_./+-]*$/, 'a component such as main', { single: true });
    const exact = suites.filter((s) => s.endsWith('/')).length;
    if (exact > 0 && exact < suites.length) paramError(m, 'suites', 'must all be exact paths (ending in /) or none');
    if (exact > 0 && components.length > 0) paramError(m, 'components', 'must be empty when the suites are exact paths');
    if (exact === 0 && components.length === 0) paramError(m, 'components', 'must list at least one component');
    const architectures = list(m, p, 'architectures', /^[a-z0-9][a-z0-9-]*$/, 'an architecture such as amd64');
    const key = pgpPublicKey(m, p, 'key');
    if (key === undefined && p.signed_by === undefined) paramError(m, 'key', 'or signed_by is required: a repository is checked against its own key');
    const signed_by = p.signed_by === undefined ? `/etc/apt/keyrings/${name}.asc` : str(m, p, 'signed_by', { absolute: true });
    return {
      name, path: where(m, p, `/etc/apt/sources.list.d/${name}.sources`), types, uris, suites, components, architectures,
      ...(key !== undefined ? { key } : {}), signed_by, enabled: bool(m, p, 'enabled', true), update: bool(m, p, 'update', true), ...showDiff(m, p),
    };
  },
  components: (p) => one('APT repository', p.name),
};

/** Keys a .repo section gets from the method's own parameters, which `options` may not set. */
const YUM_MANAGED = ['name', 'baseurl', 'mirrorlist', 'metalink', 'enabled', 'gpgcheck', 'gpgkey', 'priority'];
const YUM_URL = /^(?:https?|ftp|file):\/\/\S+$/;

export interface YumRepositoryParams extends ShowDiffParam {
  name: string;
  path: string;
  description: string;
  baseurl: string[];
  mirrorlist?: string;
  metalink?: string;
  enabled: boolean;
  gpgcheck: boolean;
  /** An armored key written to key_path (and imported), or URLs written as they are. */
  gpgkey?: { text: string } | { urls: string[] };
  key_path: string;
  priority?: number;
  options: Record<string, string>;
}

export const yumRepositorySpec: MethodSpec<YumRepositoryParams> = {
  name: 'yum_repository',
  params: [dStr('name', 'The repository id.', { required: true, example: 'nginx' }), dList('baseurl', 'Its URLs.', { example: ['https://rpm.example.org/el9'] }), dStr('mirrorlist', 'A mirror list URL.', { example: 'https://rpm.example.org/mirrors' }), dStr('metalink', 'A metalink URL.', { example: 'https://rpm.example.org/metalink' }), dStr('description', 'Its name line.', { example: 'nginx stable' }), dFlag('enabled', 'The repository is used.', { default: true }), dFlag('gpgcheck', 'Packages are checked against the key.', { default: true }), dStr('gpgkey', 'An ASCII-armored public key, or key URLs.', { example: 'https://rpm.example.org/key.asc' }), dStr('key_path', 'Where an inline key is written.', { example: '/etc/pki/rpm-gpg/RPM-GPG-KEY-nginx' }), dNum('priority', 'Priority 1 (first) to 99.', { example: 10 }), dMap('options', 'Other .repo options.', { example: { module_hotfixes: '1' } }), dStr('path', 'The .repo file (default under /etc/yum.repos.d).', { example: '/etc/yum.repos.d/nginx.repo' }), SHOW_DIFF],
  example: { name: 'nginx', baseurl: ['https://rpm.example.org/el9'] },
  validate: (p) => {
    const m = 'yum_repository';
    const name = named(m, p, 'name', REPO_NAME, 'a repository id of letters, digits, _ . : -');
    const baseurl = list(m, p, 'baseurl', YUM_URL, 'an http(s), ftp or file URL', { single: true });
    const mirrorlist = optLine(m, p, 'mirrorlist');
    const metalink = optLine(m, p, 'metalink');
    for (const [f, v] of [['mirrorlist', mirrorlist], ['metalink', metalink]] as const) if (v !== undefined && !YUM_URL.test(v)) paramError(m, f, 'must be an http(s), ftp or file URL');
    if ((baseurl.length > 0 ? 1 : 0) + (mirrorlist ? 1 : 0) + (metalink ? 1 : 0) !== 1) paramError(m, 'baseurl', 'or mirrorlist or metalink: exactly one is required');
    let gpgkey: YumRepositoryParams['gpgkey'];
    if (typeof p.gpgkey === 'string' && p.gpgkey.trimStart().startsWith('-----BEGIN')) gpgkey = { text: pgpPublicKey(m, p, 'gpgkey')! };
    else if (p.gpgkey !== undefined) gpgkey = { urls: list(m, p, 'gpgkey', YUM_URL, 'an armored public key, or key URLs', { required: true, single: true }) };
    const priority = p.priority;
    if (priority !== undefined && (typeof priority !== 'number' || !Number.isInteger(priority) || priority < 1 || priority > 99)) paramError(m, 'priority', 'must be a whole number from 1 to 99');
    const options = record(m, p, 'options', (k, v, at) => {
      if (!/^[a-z_][a-z0-9_]{0,63}$/.test(k) || YUM_MANAGED.includes(k)) paramError(m, at, `is not an option options may set (${YUM_MANAGED.join(', ')} are parameters)`);
      if (typeof v === 'boolean') return v ? '1' : '0';
      if ((typeof v !== 'string' && typeof v !== 'number') || /[\r\n\0]/.test(String(v))) paramError(m, at, 'must be a string, number or boolean on one line');
      return String(v);
    }, 64) ?? {};
    return {
      name, path: where(m, p, `/etc/yum.repos.d/${name}.repo`), description: optLine(m, p, 'description', { max: 256 }) ?? name,
      baseurl, ...(mirrorlist ? { mirrorlist } : {}), ...(metalink ? { metalink } : {}),
      enabled: bool(m, p, 'enabled', true), gpgcheck: bool(m, p, 'gpgcheck', true), ...(gpgkey ? { gpgkey } : {}),
      key_path: p.key_path === undefined ? `/etc/pki/rpm-gpg/RPM-GPG-KEY-${name}` : str(m, p, 'key_path', { absolute: true }),
      ...(priority !== undefined ? { priority: priority as number } : {}), options, ...showDiff(m, p),
    };
  },
  components: (p) => one('YUM repository', p.name),
};

export const REPO_SPECS: ReadonlyArray<MethodSpec<any>> = [aptRepositorySpec, yumRepositorySpec];
