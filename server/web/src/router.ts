/**
 * Hash routes (`#/nodes?status=unreachable&sort=name`): the page and its filters are in the URL,
 * so a view can be bookmarked and shared, and the server serves one page for them all.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  path: string;
  params: URLSearchParams;
}

export function parseHash(hash: string): Route {
  const h = hash.replace(/^#/, '') || '/';
  const i = h.indexOf('?');
  const path = i < 0 ? h : h.slice(0, i);
  return { path: path || '/', params: new URLSearchParams(i < 0 ? '' : h.slice(i + 1)) };
}

export function href(path: string, params?: URLSearchParams | Record<string, string>): string {
  const p = params instanceof URLSearchParams ? params : new URLSearchParams(params ?? {});
  const s = p.toString();
  return `#${path}${s ? `?${s}` : ''}`;
}

export function navigate(path: string, params?: URLSearchParams | Record<string, string>): void {
  location.hash = href(path, params);
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

/** What a pager's `go` does on a list page: the same query, another `page` (or `key`). */
export function pageLink(path: string, params: URLSearchParams, key = 'page'): (page: number) => void {
  return (page) => {
    const next = new URLSearchParams(params);
    next.set(key, String(page));
    navigate(path, next);
  };
}
