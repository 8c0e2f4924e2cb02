/**
 * Secrets on the node: the markers a directive's rendered params hold (shared/src/policy/
 * secrets.ts) are filled in right before the method runs, with values opened by the node key
 * from the directive's or the bundle's sealed secrets. Every value opened joins the run's
 * redactor first, so no report, diff or log line written afterwards can carry it.
 */
import { capstanError } from '@capstan/shared/errors';
import type { BundleDirective } from '@capstan/shared/policy/bundle';
import { markedSecrets, openSealed, substituteSecrets, type Redactor, type SealedSecret } from '@capstan/shared/policy/secrets';

/** The diff text of a change made by a directive that used a secret. */
export const SECRET_DIFF_NOTE = 'content changed (secret value: diff not shown)';

export interface SecretSources {
  nodeKeyPem?: string;
  bundleSecrets?: Record<string, SealedSecret>;
}

/** Whether `params` use any secret. */
export const usesSecrets = (params: unknown): boolean => markedSecrets(params).size > 0;

/**
 * `params` with their secrets filled in; ERR_SECRET when one is not carried by the directive or
 * the bundle, or does not open with the node key.
 */
export function fillSecrets<T>(params: T, d: Pick<BundleDirective, 'secrets'>, src: SecretSources, redactor: Redactor): T {
  const names = markedSecrets(params);
  if (names.size === 0) return params;
  const values = new Map<string, string>();
  for (const name of names) {
    const sealed = (d.secrets && Object.hasOwn(d.secrets, name) ? d.secrets[name] : undefined)
      ?? (src.bundleSecrets && Object.hasOwn(src.bundleSecrets, name) ? src.bundleSecrets[name] : undefined);
    if (sealed === undefined) throw capstanError('ERR_SECRET', `secret ${name} is used but the policy does not carry it`);
    if (src.nodeKeyPem === undefined) throw capstanError('ERR_SECRET', `secret ${name}: no node key to open it with`);
    const value = openSealed(sealed, src.nodeKeyPem);
    redactor.add(value);
    values.set(name, value);
  }
  return substituteSecrets(params, values);
}
