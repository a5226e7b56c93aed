// The session: the access token (when the server has auth on) and the
// connection state shown in the banner. Both are small external stores read
// with useSyncExternalStore, so that the GraphQL client (outside React) can
// update them.
import { useSyncExternalStore } from 'react';

type Listener = () => void;

function store<T>(initial: T) {
  let value = initial;
  const listeners = new Set<Listener>();
  return {
    get: () => value,
    set(next: T) {
      if (Object.is(next, value)) return;
      value = next;
      listeners.forEach((l) => l());
    },
    subscribe(l: Listener) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
}

const TOKEN_KEY = 'taskgraph.token';

function readToken(): string {
  try {
    return localStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

export interface AuthState {
  token: string;
  // needsLogin is set when the server answered UNAUTHENTICATED.
  needsLogin: boolean;
}

export const auth = store<AuthState>({ token: readToken(), needsLogin: false });

export function setToken(token: string) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // kept in memory only
  }
  auth.set({ token, needsLogin: false });
}

export function requireLogin() {
  const cur = auth.get();
  if (!cur.needsLogin) auth.set({ ...cur, needsLogin: true });
}

export function signOut() {
  try {
    localStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing stored
  }
  auth.set({ token: '', needsLogin: true });
}

export function useAuth(): AuthState {
  return useSyncExternalStore(auth.subscribe, auth.get);
}

export type ConnectionPhase = 'connecting' | 'connected' | 'lost';

export interface ConnectionState {
  phase: ConnectionPhase;
  // retryAt is when the next reconnect attempt starts (ms since epoch).
  retryAt: number | null;
  // epoch increments on every reconnect after a loss: pages refetch when it
  // changes, since events may have been missed while offline.
  epoch: number;
  // restoredAt is when the last loss ended, for a short "reconnected" note.
  restoredAt: number | null;
}

export const connection = store<ConnectionState>({ phase: 'connecting', retryAt: null, epoch: 0, restoredAt: null });

export function useConnection(): ConnectionState {
  return useSyncExternalStore(connection.subscribe, connection.get);
}

export function markConnected() {
  const cur = connection.get();
  if (cur.phase === 'connected') return;
  const wasLost = cur.phase === 'lost';
  connection.set({
    phase: 'connected',
    retryAt: null,
    epoch: wasLost ? cur.epoch + 1 : cur.epoch,
    restoredAt: wasLost ? Date.now() : cur.restoredAt,
  });
}

// markResync bumps the epoch without a lost connection: the server ended a
// subscription because changes were missed (RESYNC_REQUIRED) or because it
// shuts down, so pages read again what they show (useOnReconnect).
export function markResync() {
  const cur = connection.get();
  connection.set({ ...cur, epoch: cur.epoch + 1 });
}

export function markLost(retryAt: number | null) {
  const cur = connection.get();
  connection.set({ ...cur, phase: 'lost', retryAt });
}
