/**
 * Installing the agent on one host over SSH (docs/bootstrap.md). This is the part a relay can run
 * as well as the server: it receives a plan (address, credential, package chooser, commands) and
 * reports through hooks (steps, the host key), and never touches a store. The ssh2 library is
 * loaded on first use, so a program that never bootstraps never loads it (the agent package does
 * not carry it).
 *
 * Steps: connect (TCP, SSH handshake — where the host key is checked against its pin — and
 * authentication), verify (OS, architecture, sudo), copy (SFTP of the package and the agent's
 * configuration into a private temporary directory), install (dpkg, the configuration, the timer).
 * Every failure is a coded error; the message carries what the host said, never the secret.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Client, ClientChannel, SFTPWrapper } from 'ssh2';
import { capstanError, type CapstanError } from '@capstan/shared/errors';

export type BootstrapStep = 'connect' | 'verify' | 'copy' | 'install' | 'enrol' | 'done';

export interface SshCredential {
  user: string;
  port: number;
  privateKey?: string;
  passphrase?: string;
  password?: string;
}

export interface AgentPackage {
  /** A local .deb file. */
  path: string;
  /** Its Debian architecture (amd64, arm64, all). */
  arch: string;
}

export interface BootstrapPlan {
  host: string;
  credential: SshCredential;
  /** The agent package for a Debian architecture, or null when there is none. */
  packageFor(arch: string): Promise<AgentPackage | null>;
  /** The agent's configuration (TOML) to write as <install_root>/etc/capstan/agent.toml. */
  agentConfig: string;
  /** `/` on a real host; another directory installs there (dpkg --root; test and image builds). */
  installRoot: string;
  /** Prefix of privileged commands (`sudo -n`); empty when the login user is root. */
  sudo: string;
  /** Run (with sudo) after the install to start the agent; empty: nothing is started. */
  startCommand: string;
  /** Where the temporary directory is made on the host. */
  remoteTmp: string;
  connectTimeoutMs: number;
  commandTimeoutMs: number;
  /** Ends the connection at once (the host program is stopping): the bootstrap rejects. */
  signal?: AbortSignal;
}

export interface BootstrapHooks {
  step(step: BootstrapStep, message: string): Promise<void>;
  /**
   * The host key the server presented: answers true to go on (pinned now or matching the pin),
   * false when it differs from the pin (the connection is then refused before authenticating).
   */
  hostKey(algorithm: string, fingerprint: string): Promise<boolean>;
}

export interface BootstrapOutcome {
  os: string;
  arch: string;
  hostKey: { algorithm: string; fingerprint: string };
}

/** `SHA256:<base64, no padding>` of an SSH public key blob, as `ssh-keygen -l` prints it. */
export function sshFingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** The algorithm name at the start of an SSH public key blob (string: uint32 length, bytes). */
export function sshKeyAlgorithm(blob: Buffer): string {
  if (blob.length < 4) return 'unknown';
  const n = blob.readUInt32BE(0);
  return n > 0 && n <= 64 && blob.length >= 4 + n ? blob.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

/** One shell word, single-quoted. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

interface Exec {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Output kept per command: enough for a diagnosis, bounded whatever the host prints. */
const MAX_OUTPUT = 64 * 1024;
const tail = (s: string, n = 400) => (s.length > n ? `…${s.slice(-n)}` : s).trim();

function exec(conn: Client, command: string, timeoutMs: number): Promise<Exec> {
  return new Promise((resolve, reject) => {
    conn.exec(command, (err, ch: ClientChannel) => {
      if (err) return reject(capstanError('ERR_BOOTSTRAP_CONNECT', `cannot run a command: ${err.message}`));
      let stdout = '';
      let stderr = '';
      const timer = setTimeout(() => {
        ch.close();
        reject(capstanError('ERR_BOOTSTRAP_COMMAND_TIMEOUT', `a command took longer than ${timeoutMs} ms (bootstrap.command_timeout)`));
      }, timeoutMs);
      ch.on('data', (d: Buffer) => { if (stdout.length < MAX_OUTPUT) stdout += d.toString('utf8'); });
      ch.stderr.on('data', (d: Buffer) => { if (stderr.length < MAX_OUTPUT) stderr += d.toString('utf8'); });
      ch.on('close', (code: number | null) => {
        clearTimeout(timer);
        resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
      });
    });
  });
}

function sftpOf(conn: Client): Promise<SFTPWrapper> {
  return new Promise((resolve, reject) => conn.sftp((err, s) => (err ? reject(capstanError('ERR_BOOTSTRAP_COPY', `SFTP refused: ${err.message}`)) : resolve(s))));
}

function put(sftp: SFTPWrapper, local: string, remote: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(capstanError('ERR_BOOTSTRAP_COMMAND_TIMEOUT', `copying ${remote} took longer than ${timeoutMs} ms`)), timeoutMs);
    sftp.fastPut(local, remote, { mode: 0o600 }, (err) => {
      clearTimeout(timer);
      if (err) reject(capstanError('ERR_BOOTSTRAP_COPY', `cannot copy to ${remote}: ${err.message}`));
      else resolve();
    });
  });
}

function write(sftp: SFTPWrapper, remote: string, text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    sftp.writeFile(remote, text, { mode: 0o600 }, (err) => (err ? reject(capstanError('ERR_BOOTSTRAP_COPY', `cannot write ${remote}: ${err.message}`)) : resolve()));
  });
}

/** Connect and authenticate; the host key goes through hooks.hostKey during the handshake. */
async function connect(plan: BootstrapPlan, hooks: BootstrapHooks): Promise<{ conn: Client; hostKey: { algorithm: string; fingerprint: string } }> {
  const { Client: SshClient } = (await import('ssh2')).default;
  const conn = new SshClient();
  if (plan.signal?.aborted) throw capstanError('ERR_BOOTSTRAP_CONNECT', 'stopping');
  // One listener per connection on a signal shared by every task: removed when the connection closes.
  const onAbort = () => conn.destroy();
  plan.signal?.addEventListener('abort', onAbort, { once: true });
  conn.once('close', () => plan.signal?.removeEventListener('abort', onAbort));
  let hostKey: { algorithm: string; fingerprint: string } | null = null;
  let changed = false;
  const c = plan.credential;
  return new Promise((resolve, reject) => {
    conn.on('ready', () => resolve({ conn, hostKey: hostKey! }));
    // end() before ready (an abort) closes without an error event.
    conn.on('close', () => reject(capstanError('ERR_BOOTSTRAP_CONNECT', `the connection to ${plan.host} closed`)));
    conn.on('error', (err: Error & { level?: string }) => {
      conn.end();
      if (changed) return reject(capstanError('ERR_BOOTSTRAP_HOST_KEY_CHANGED', `the host key of ${plan.host} (${hostKey?.algorithm} ${hostKey?.fingerprint}) is not the one pinned: clear the pin once the change is known to be legitimate`));
      if (err.level === 'client-authentication') return reject(capstanError('ERR_BOOTSTRAP_AUTH', `${plan.host} refused the credential for user ${c.user}`));
      reject(capstanError('ERR_BOOTSTRAP_CONNECT', `cannot connect to ${plan.host}:${c.port}: ${err.message}`));
    });
    conn.connect({
      host: plan.host,
      port: c.port,
      username: c.user,
      ...(c.privateKey !== undefined && { privateKey: c.privateKey }),
      ...(c.passphrase !== undefined && { passphrase: c.passphrase }),
      ...(c.password !== undefined && { password: c.password }),
      readyTimeout: plan.connectTimeoutMs,
      // No agent, no keyboard-interactive prompts: only what the credential holds.
      tryKeyboard: false,
      hostVerifier: (key: Buffer, verify: (ok: boolean) => void) => {
        hostKey = { algorithm: sshKeyAlgorithm(key), fingerprint: sshFingerprint(key) };
        hooks.hostKey(hostKey.algorithm, hostKey.fingerprint).then(
          (ok) => {
            changed = !ok;
            verify(ok);
          },
          () => verify(false),
        );
      },
    });
  });
}

/** Run the plan on one host; resolves when the agent is installed (and started, if asked). */
export async function bootstrapOverSsh(plan: BootstrapPlan, hooks: BootstrapHooks): Promise<BootstrapOutcome> {
  await hooks.step('connect', `connecting to ${plan.host}:${plan.credential.port} as ${plan.credential.user}`);
  const { conn, hostKey } = await connect(plan, hooks);
  const sudo = plan.sudo.trim();
  const priv = (cmd: string) => (sudo ? `${sudo} ${cmd}` : cmd);
  const run = (cmd: string) => exec(conn, cmd, plan.commandTimeoutMs);
  let tmp: string | null = null;
  try {
    await hooks.step('verify', `host key ${hostKey.algorithm} ${hostKey.fingerprint}; checking the system`);
    const sys = await run('uname -s; uname -m; if command -v dpkg >/dev/null 2>&1; then dpkg --print-architecture; else echo -; fi');
    const [kernel = '', machine = '', arch = '-'] = sys.stdout.split('\n').map((s) => s.trim());
    if (sys.code !== 0 || kernel !== 'Linux') throw capstanError('ERR_BOOTSTRAP_UNSUPPORTED_OS', `${plan.host} runs ${kernel || 'an unknown system'}: only Linux with dpkg is supported`);
    if (arch === '-' || arch === '') throw capstanError('ERR_BOOTSTRAP_UNSUPPORTED_OS', `${plan.host} (${machine}) has no dpkg: only Debian-family systems are supported`);
    const pkg = await plan.packageFor(arch);
    if (!pkg) throw capstanError('ERR_BOOTSTRAP_UNSUPPORTED_OS', `no agent package for architecture ${arch} (${machine}) on ${plan.host}`);
    if (sudo) {
      const s = await run(priv('true'));
      if (s.code !== 0) throw capstanError('ERR_BOOTSTRAP_NO_SUDO', `${JSON.stringify(sudo)} does not run commands without a password on ${plan.host}: ${tail(s.stderr || s.stdout) || `exit ${s.code}`}`);
    }

    await hooks.step('copy', `copying the agent package (${arch}) and its configuration`);
    const dir = `${plan.remoteTmp.replace(/\/+$/, '')}/capstan-bootstrap-${randomBytes(6).toString('hex')}`;
    const mk = await run(`umask 077 && mkdir ${shellQuote(dir)}`);
    if (mk.code !== 0) throw capstanError('ERR_BOOTSTRAP_COPY', `cannot make ${dir}: ${tail(mk.stderr)}`);
    tmp = dir;
    const sftp = await sftpOf(conn);
    try {
      await put(sftp, pkg.path, `${dir}/capstan-agent.deb`, plan.commandTimeoutMs);
      await write(sftp, `${dir}/agent.toml`, plan.agentConfig);
    } finally {
      sftp.end();
    }

    await hooks.step('install', `installing into ${plan.installRoot}`);
    const root = plan.installRoot.replace(/\/+$/, '') || '/';
    // Another root: dpkg's own way of installing elsewhere (the maintainer scripts honour
    // $DPKG_ROOT and touch nothing outside it); node.js is not in that root's database.
    const rootFlags = root === '/' ? '' : ` --root=${shellQuote(root)} --log=${shellQuote(`${root}/var/log/dpkg.log`)} --force-not-root --force-script-chrootless --force-depends`;
    const inst = await run(priv(`dpkg${rootFlags} -i ${shellQuote(`${dir}/capstan-agent.deb`)}`));
    if (inst.code !== 0) throw capstanError('ERR_BOOTSTRAP_INSTALL', `dpkg failed (exit ${inst.code}): ${tail(inst.stderr || inst.stdout)}`);
    const confPath = `${root === '/' ? '' : root}/etc/capstan/agent.toml`;
    const conf = await run(priv(`install -D -m 0600 ${shellQuote(`${dir}/agent.toml`)} ${shellQuote(confPath)}`));
    if (conf.code !== 0) throw capstanError('ERR_BOOTSTRAP_INSTALL', `cannot write ${confPath}: ${tail(conf.stderr)}`);
    if (plan.startCommand.trim()) {
      const st = await run(priv(plan.startCommand.trim()));
      if (st.code !== 0) throw capstanError('ERR_BOOTSTRAP_INSTALL', `${plan.startCommand} failed (exit ${st.code}): ${tail(st.stderr || st.stdout)}`);
    }
    return { os: kernel, arch, hostKey };
  } finally {
    // The package and the configuration (it holds the enrollment secret) do not stay behind.
    if (tmp) await run(`rm -rf ${shellQuote(tmp)}`).catch(() => undefined);
    conn.end();
  }
}

/** Whether an error is one of this module's coded failures (as opposed to a bug). */
export function isBootstrapError(err: unknown): err is CapstanError {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && (code.startsWith('ERR_BOOTSTRAP_') || code.startsWith('ERR_CREDENTIAL_'));
}
