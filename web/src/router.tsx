// A small router over the History API: the console has six routes, and a
// router dependency would outweigh them. Paths are relative to the base
// (/console/) the binary serves the bundle under.
import { useMemo, useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';

export const BASE = import.meta.env.BASE_URL.replace(/\/$/, '');

const listeners = new Set<() => void>();

function emit() {
  listeners.forEach((l) => l());
}

if (typeof window !== 'undefined') window.addEventListener('popstate', emit);

function subscribe(l: () => void) {
  listeners.add(l);
  return () => listeners.delete(l);
}

function snapshot() {
  return window.location.pathname + window.location.search;
}

// href returns the browser URL of an app path ("/tasks?x=1").
export function href(to: string): string {
  return BASE + (to.startsWith('/') ? to : '/' + to);
}

export function navigate(to: string, { replace = false } = {}) {
  const url = href(to);
  if (url === snapshot()) return;
  if (replace) window.history.replaceState(null, '', url);
  else window.history.pushState(null, '', url);
  window.scrollTo?.(0, 0);
  emit();
}

export interface Location {
  path: string; // without the base, always starting with "/"
  search: URLSearchParams;
}

export function parseLocation(s: string): Location {
  const q = s.indexOf('?');
  const pathname = q < 0 ? s : s.slice(0, q);
  let path = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname;
  if (!path.startsWith('/')) path = '/' + path;
  return { path, search: new URLSearchParams(q < 0 ? '' : s.slice(q + 1)) };
}

// useLocation is stable while the URL is: pages derive query variables
// from it, and a new object per render would reset their state.
export function useLocation(): Location {
  const s = useSyncExternalStore(subscribe, snapshot, () => '/');
  return useMemo(() => parseLocation(s), [s]);
}

export function Link({ to, onClick, ...rest }: { to: string } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  return (
    <a
      href={href(to)}
      onClick={(e: MouseEvent<HTMLAnchorElement>) => {
        onClick?.(e);
        if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(to);
      }}
      {...rest}
    />
  );
}
