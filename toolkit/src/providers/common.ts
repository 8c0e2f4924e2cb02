/** What the drivers share: reading referenced credentials, and turning cloud errors into ours. */
import { capstanError, type CapstanError } from '@capstan/shared/errors';

/** The value of the environment variable a credential reference names; missing is a provider error. */
export function envCredential(env: NodeJS.ProcessEnv, vars: Record<string, string>, role: string): string {
  const name = vars[role];
  const value = name === undefined ? undefined : env[name];
  if (!value) throw capstanError('ERR_PROVIDER', `credential ${role}: environment variable ${name ?? '(none)'} is not set on the provider's host`);
  return value;
}

/**
 * A cloud error as ours: the cloud's code and message (what the admin needs to fix access),
 * never the request (which may carry signed headers). Bounded, single line.
 */
export function providerError(where: string, err: unknown): CapstanError {
  const e = err as { name?: string; code?: string; message?: string; $metadata?: { httpStatusCode?: number }; statusCode?: number } | null;
  if (e && (e as { code?: string }).code === 'ERR_PROVIDER') return err as CapstanError;
  const status = e?.$metadata?.httpStatusCode ?? e?.statusCode;
  const code = e?.code && e.code !== e?.name ? `${e.name ?? 'Error'}/${e.code}` : (e?.name ?? 'Error');
  const message = String(e?.message ?? err).replace(/\s+/g, ' ').slice(0, 500);
  return capstanError('ERR_PROVIDER', `${where}: ${code}${status ? ` (HTTP ${status})` : ''}: ${message}`, { cause: err });
}

/**
 * A connection test: reachable when `probe` resolves (a listing of one page, a read of the hosts
 * file), else unreachable with the error the cloud gave.
 */
export async function probeReachable(probe: () => Promise<unknown>): Promise<{ reachable: boolean; error?: string }> {
  try {
    await probe();
    return { reachable: true };
  } catch (err) {
    return { reachable: false, error: (err as Error).message };
  }
}
