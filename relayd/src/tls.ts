/**
 * Certificates from the configuration: the agent-facing listener's (shared with the server, see
 * @capstan/shared http/tls.ts) and the upstream's trust (pinned certificate or CA).
 * Read at start and again on reload, so a renewed certificate needs no restart.
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { SecureContextOptions } from 'node:tls';
import { capstanError } from '@capstan/shared/errors';
import { loadListenerTls as loadSharedListenerTls, type ListenerTls } from '@capstan/toolkit/http/tls';
import type { RelaydConfig } from './config.js';
import type { UpstreamTls } from './forward/upstream.js';

async function readPem(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw capstanError('ERR_CONFIG', `cannot read ${what} ${path}: ${(err as Error).message}`);
  }
}

/** The listener's TLS options, or null for plain HTTP (loopback, or tls.allow_plaintext). */
export function loadListenerTls(c: RelaydConfig): Promise<ListenerTls | null> {
  return loadSharedListenerTls(c.tls);
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
