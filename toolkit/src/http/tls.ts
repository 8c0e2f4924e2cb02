/**
 * The agent-facing listener's transport, shared by relayd and server: the `[tls]` configuration
 * section both programs declare, its cross-key checks, and the certificate and key read from it
 * (TLS 1.2 or newer only; 1.0 and 1.1 are refused at the handshake).
 *
 * A listener that is not loopback speaks TLS: in clear, the admin token, node tokens and run logs
 * would cross the network readable by anyone on the path. A program refuses to start with such a
 * listener unless its configuration says `tls.allow_plaintext = true` (a TLS-terminating proxy in
 * front, an isolated lab network).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import type { SecureContextOptions } from 'node:tls';
import { capstanError } from '@capstan/shared/errors';
import { parseListen } from '@capstan/shared/config';

/** The `[tls]` section, the same in relayd's and the server's schema. */
export const LISTENER_TLS_SCHEMA = {
  /** PEM certificate (chain) and key of the listener; both empty → plain HTTP (loopback only, see allow_plaintext). */
  cert_file: { type: 'string', default: '', optional: true },
  key_file: { type: 'string', default: '', optional: true },
  /** Oldest protocol accepted: TLSv1.2 or TLSv1.3 (1.0 and 1.1 are always refused). */
  min_version: { type: 'string', default: 'TLSv1.2' },
  /**
   * Let a listener that is not loopback speak plain HTTP. Everything it carries (admin and node
   * tokens, run logs, inventories) is then readable and changeable on the network: only behind a
   * TLS-terminating proxy or on an isolated network.
   */
  allow_plaintext: { type: 'boolean', default: false },
} as const;

export interface ListenerTlsConfig {
  readonly cert_file: string;
  readonly key_file: string;
  readonly min_version: string;
  readonly allow_plaintext: boolean;
}

export type ListenerTls = SecureContextOptions & { minVersion: 'TLSv1.2' | 'TLSv1.3' };

/** Whether a listen host only accepts connections from this machine (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  if (isIP(v4) === 4) return v4.startsWith('127.');
  if (isIP(h) === 6) return /^(0{0,4}:){7}0{0,3}1$|^::1$/.test(h);
  return false;
}

/**
 * The checks across keys: both files or none, a known minimum version, and no plaintext listener
 * off loopback unless allowed (ERR_PLAINTEXT_LISTEN, a configuration error: exit 2).
 */
export function checkListenerTlsConfig(tls: ListenerTlsConfig, listen: string): void {
  if ((tls.cert_file === '') !== (tls.key_file === '')) {
    throw capstanError('ERR_CONFIG', 'tls.cert_file and tls.key_file must be given together');
  }
  if (tls.min_version !== 'TLSv1.2' && tls.min_version !== 'TLSv1.3') {
    throw capstanError('ERR_CONFIG', 'tls.min_version must be "TLSv1.2" or "TLSv1.3"');
  }
  const host = parseListen(listen)?.host;
  if (tls.cert_file === '' && host !== undefined && !isLoopbackHost(host) && !tls.allow_plaintext) {
    throw capstanError(
      'ERR_PLAINTEXT_LISTEN',
      `general.listen ${listen} is not loopback and no tls.cert_file is set: tokens, run logs and inventories would cross the ` +
        'network in clear, readable and changeable by anyone on the path. Set tls.cert_file and tls.key_file, or ' +
        'tls.allow_plaintext = true if a TLS-terminating proxy or an isolated network protects this listener',
    );
  }
}

async function readPem(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw capstanError('ERR_CONFIG', `cannot read ${what} ${path}: ${(err as Error).message}`);
  }
}

/** The listener's TLS options, or null for plain HTTP. Certificate and key are parsed here. */
export async function loadListenerTls(tls: ListenerTlsConfig): Promise<ListenerTls | null> {
  if (tls.cert_file === '') return null;
  const cert = await readPem(tls.cert_file, 'tls.cert_file');
  const key = await readPem(tls.key_file, 'tls.key_file');
  try {
    new X509Certificate(cert);
    createPrivateKey(key);
  } catch (err) {
    throw capstanError('ERR_CONFIG', `tls.cert_file / tls.key_file: ${(err as Error).message}`);
  }
  return { cert, key, minVersion: tls.min_version as 'TLSv1.2' | 'TLSv1.3' };
}
