/**
 * Certificates from the configuration: the agent-facing listener's (TLS 1.2 or newer only; 1.0
 * and 1.1 are refused at the handshake) and the upstream's trust (pinned certificate or CA).
 * Read at start and again on reload, so a renewed certificate needs no restart.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { SecureContextOptions } from 'node:tls';
import { capstanError } from './shared.js';
import type { RelaydConfig } from './config.js';
import type { UpstreamTls } from './forward/upstream.js';

async function readPem(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw capstanError('ERR_CONFIG', `cannot read ${what} ${path}: ${(err as Error).message}`);
  }
}

export type ListenerTls = SecureContextOptions & { minVersion: 'TLSv1.2' | 'TLSv1.3' };

/** The listener's TLS options, or null for plain HTTP (loopback set-ups and tests). */
export async function loadListenerTls(c: RelaydConfig): Promise<ListenerTls | null> {
  if (c.tls.cert_file === '') return null;
  const cert = await readPem(c.tls.cert_file, 'tls.cert_file');
  const key = await readPem(c.tls.key_file, 'tls.key_file');
  try {
    new X509Certificate(cert);
    createPrivateKey(key);
  } catch (err) {
    throw capstanError('ERR_CONFIG', `tls.cert_file / tls.key_file: ${(err as Error).message}`);
  }
  return { cert, key, minVersion: c.tls.min_version as 'TLSv1.2' | 'TLSv1.3' };
}

export async function loadUpstreamTls(c: RelaydConfig): Promise<UpstreamTls | undefined> {
  if (c.upstream.pinned_cert_file !== '') {
    const pem = await readPem(c.upstream.pinned_cert_file, 'upstream.pinned_cert_file');
    try {
      new X509Certificate(pem);
    } catch (err) {
      throw capstanError('ERR_CONFIG', `upstream.pinned_cert_file: ${(err as Error).message}`);
    }
    return { pinnedCertPem: pem };
  }
  if (c.upstream.ca_file !== '') return { caPem: await readPem(c.upstream.ca_file, 'upstream.ca_file') };
  return undefined;
}

/** The admin token, or null when none is configured; an empty file is a configuration error. */
export async function loadAdminToken(c: RelaydConfig): Promise<string | null> {
  if (c.general.admin_token_file === '') return null;
  const token = (await readPem(c.general.admin_token_file, 'general.admin_token_file')).trim();
  if (token.length < 16) throw capstanError('ERR_CONFIG', 'general.admin_token_file must hold a token of at least 16 characters');
  return token;
}
