/**
 * The admin API, as the console calls it: same origin, the sign-in cookie, and the CSRF token on
 * every write. A 401 means the sign-in is over: the app shows the sign-in form again.
 */
export interface Me {
  name: string;
  role: 'admin' | 'operator' | 'viewer';
  expires_at: string;
  csrf_token: string;
  /** The role's policy changes must go through a change request (`[policy] review_roles`). */
  review_required?: boolean;
}

export class ApiError extends Error {
  /**
   * `field`: the refused field's path in the request body (`params.path`); `position`: where a
   * filter expression went wrong (ERR_FILTER_SYNTAX), as the API's error body gives them.
   */
  constructor(readonly status: number, readonly code: string, message: string, readonly field?: string, readonly position?: number) {
    super(message);
  }
}

let csrf = '';
let onSignedOut: () => void = () => undefined;

export function setSignIn(me: Me | null, signedOut?: () => void): void {
  csrf = me?.csrf_token ?? '';
  if (signedOut) onSignedOut = signedOut;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['x-csrf-token'] = csrf;
  const res = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    throw new ApiError(res.status, 'ERR_BAD_ANSWER', `the server answered ${res.status} with something other than JSON`);
  }
  if (!res.ok) {
    const e = json?.error;
    const err = new ApiError(res.status, e?.code ?? 'ERR_UNKNOWN', e?.message ?? `HTTP ${res.status}`,
      typeof e?.field === 'string' ? e.field : undefined, typeof e?.position === 'number' ? e.position : undefined);
    if (res.status === 401 && !path.startsWith('/console/sign-in')) onSignedOut();
    throw err;
  }
  return json as T;
}

export const get = <T>(path: string) => call<T>('GET', path);
export const post = <T>(path: string, body?: unknown) => call<T>('POST', path, body);
export const put = <T>(path: string, body?: unknown) => call<T>('PUT', path, body);
export const del = <T>(path: string) => call<T>('DELETE', path);

/** A query string from pairs; repeated keys are kept (filters OR their values). */
export function qs(params: URLSearchParams | Array<[string, string]>): string {
  const p = params instanceof URLSearchParams ? params : new URLSearchParams(params);
  const s = p.toString();
  return s ? `?${s}` : '';
}

export interface ListAnswer<T> {
  data: T[];
  total: number;
  page?: number;
  per_page?: number;
}

export type Counts = Record<string, number>;

export interface WithPercent {
  counts: Counts;
  total: number;
  compliance: number | null;
  percent: Counts;
}
