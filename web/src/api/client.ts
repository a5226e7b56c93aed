// The GraphQL client: urql with Graphcache (normalised by Task id, so that
// one taskUpdated event updates every list, detail and dashboard showing
// that task), queries and mutations over HTTP, subscriptions over one
// graphql-ws websocket that reconnects with backoff.
import { Client, fetchExchange, mapExchange, subscriptionExchange } from '@urql/core';
import { createContext, useContext } from 'react';
import { useClient } from 'urql';
import { cacheExchange } from '@urql/exchange-graphcache';
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { fromCombined } from './errors';
import { markConnected, markLost, markResync, requireLogin } from './session';

export const GRAPHQL_PATH = '/query';

// backoff returns the wait before reconnect attempt n (0-based): 1 s, 2 s,
// 4 s... capped at 30 s, with up to 30% jitter so that many consoles do not
// reconnect in step after a server restart.
export function backoff(retries: number, random: () => number = Math.random): number {
  const base = Math.min(30_000, 1000 * 2 ** Math.min(retries, 10));
  return Math.round(base * (1 + 0.3 * random()));
}

// Close codes of graphql-transport-ws that mean "your credentials".
const AUTH_CLOSE_CODES = new Set([4401, 4403]);

function closeCode(e: unknown): number | undefined {
  return typeof e === 'object' && e !== null && 'code' in e ? Number((e as { code: unknown }).code) : undefined;
}

let wakeRetry: (() => void) | null = null;

// retryNow skips the rest of the current reconnect wait.
export function retryNow() {
  wakeRetry?.();
}

export function authHeaders(token: string): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

export function wsUrl(loc: Pick<Location, 'protocol' | 'host'> = window.location): string {
  return `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}${GRAPHQL_PATH}`;
}

// Codes with which the server ends a stream that the client should open
// again: RESYNC_REQUIRED (changes were missed: re-read, then subscribe) and
// UNAVAILABLE (the node shuts down: reconnect, to it or another).
const RESUBSCRIBE_CODES = new Set(['RESYNC_REQUIRED', 'UNAVAILABLE']);

interface Sink<T> {
  next(value: T): void;
  error(error: unknown): void;
  complete(): void;
}

type Result = { errors?: ReadonlyArray<{ extensions?: Record<string, unknown> }> };

// resubscribing wraps a subscribe function so that a stream the server ends
// with RESYNC_REQUIRED or UNAVAILABLE is not ended for the page: the last
// error is swallowed, onResync tells the pages to read again what they show
// (what changed meanwhile was not delivered), and the same operation is
// subscribed again after a backoff (1 s, 2 s, 4 s... reset by a delivered
// result). Any other error or end reaches the page as before.
export function resubscribing<T extends Result>(
  subscribe: (sink: Sink<T>) => () => void,
  onResync: () => void,
  wait: (retries: number) => number = backoff,
): (sink: Sink<T>) => () => void {
  return (sink) => {
    let generation = 0;
    let retries = 0;
    let closed = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let current: (() => void) | null = null;
    const start = () => {
      const mine = ++generation;
      current = subscribe({
        next(result) {
          if (mine !== generation) return;
          const codes = (result.errors ?? []).map((e) => e.extensions?.code);
          if (codes.some((c) => typeof c === 'string' && RESUBSCRIBE_CODES.has(c))) {
            generation++; // what this stream still says is stale
            const stop = current;
            current = null;
            stop?.();
            onResync();
            if (!closed) timer = setTimeout(start, wait(retries++));
            return;
          }
          retries = 0;
          sink.next(result);
        },
        error(e) {
          if (mine === generation) sink.error(e);
        },
        complete() {
          if (mine === generation) sink.complete();
        },
      });
    };
    start();
    return () => {
      closed = true;
      generation++;
      clearTimeout(timer);
      current?.();
    };
  };
}

export interface Api {
  client: Client;
  // The same endpoints without the normalised cache: for pages whose
  // answers are too big to keep live in it (see Uncached).
  uncached: Client;
  ws: WsClient;
  dispose: () => void;
}

export function createApi(token: string): Api {
  let pongTimer: ReturnType<typeof setTimeout> | undefined;
  let socket: WebSocket | null = null;
  let everConnected = false;
  let disposed = false;
  const ws = createWsClient({
    url: wsUrl(),
    connectionParams: () => authHeaders(token),
    // Stay connected even with no subscription, so that the banner tells
    // about a lost server before the operator clicks anything.
    lazy: false,
    onNonLazyError: () => {},
    keepAlive: 10_000,
    retryAttempts: Infinity,
    shouldRetry: (e) => {
      if (AUTH_CLOSE_CODES.has(closeCode(e) ?? 0)) {
        requireLogin();
        return false;
      }
      return true;
    },
    retryWait: (retries) =>
      new Promise<void>((resolve) => {
        const wait = backoff(retries);
        markLost(Date.now() + wait);
        const timer = setTimeout(done, wait);
        function done() {
          clearTimeout(timer);
          wakeRetry = null;
          resolve();
        }
        wakeRetry = done;
      }),
    on: {
      connected: (s) => {
        socket = s as WebSocket;
        everConnected = true;
        markConnected();
      },
      closed: (e) => {
        socket = null;
        clearTimeout(pongTimer);
        if (disposed || AUTH_CLOSE_CODES.has(closeCode(e) ?? 0)) return;
        markLost(null);
      },
      error: () => {
        if (!disposed && !everConnected) markLost(null);
      },
      // A server that vanished without closing the TCP connection (a
      // suspended laptop, a dropped NAT entry) is noticed by a missing pong.
      ping: (received) => {
        if (received) return;
        clearTimeout(pongTimer);
        pongTimer = setTimeout(() => {
          if (socket?.readyState === WebSocket.OPEN) socket.close(4408, 'Request Timeout');
        }, 5_000);
      },
      pong: (received) => {
        if (received) clearTimeout(pongTimer);
      },
    },
  });

  const onError = mapExchange({
    onError(error) {
      if (fromCombined(error).some((e) => e.code === 'UNAUTHENTICATED')) requireLogin();
    },
  });
  const subscriptions = subscriptionExchange({
    forwardSubscription(request) {
      const input = { ...request, query: request.query || '' };
      return {
        subscribe(sink) {
          const unsubscribe = resubscribing((s) => ws.subscribe(input, s), markResync)(sink);
          return { unsubscribe };
        },
      };
    },
  });
  const client = new Client({
    url: GRAPHQL_PATH,
    requestPolicy: 'cache-and-network',
    fetchOptions: () => ({ headers: authHeaders(token) }),
    exchanges: [
      onError,
      cacheExchange({
        keys: {
          TaskConnection: () => null,
          TaskEdge: () => null,
          TaskLogConnection: () => null,
          TaskLogEdge: () => null,
          PageInfo: () => null,
          TaskStats: () => null,
          StatusCount: () => null,
          TypeCount: () => null,
          TaskActionResult: () => null,
          BulkPreview: () => null,
          BulkStatusCount: () => null,
          ActionError: () => null,
          DownloadLink: () => null,
          TaskType: (t) => String(t.name),
          RetryPolicy: (p) => String(p.name),
          ScheduleConnection: () => null,
          ScheduleEdge: () => null,
          ScheduleEventConnection: () => null,
          ScheduleEventEdge: () => null,
          TypeControl: (c) => String(c.type),
          WaitReason: () => null,
          AuditLogConnection: () => null,
          AuditLogEdge: () => null,
          WorkflowConnection: () => null,
          WorkflowEdge: () => null,
          InputVersion: () => null,
          FieldChange: () => null,
          ReviewQueueStats: () => null,
          HistoryPoint: () => null,
          DeadlineReportRow: () => null,
          TenantQuota: (q) => String(q.tenant),
        },
      }),
      fetchExchange,
      subscriptions,
    ],
  });

  const uncached = new Client({
    url: GRAPHQL_PATH,
    requestPolicy: 'network-only',
    fetchOptions: () => ({ headers: authHeaders(token) }),
    exchanges: [onError, fetchExchange, subscriptions],
  });

  return {
    client,
    uncached,
    ws,
    dispose: () => {
      disposed = true;
      clearTimeout(pongTimer);
      void ws.dispose();
    },
  };
}

// Uncached provides the client without the normalised cache. A workflow's
// page reads 10,000 steps and receives an event for each of their changes:
// in the cache, every event would be keyed, written and read back through
// layers that grow with them, which kept a busy page tens of seconds
// behind; the page merges the events itself (by version).
export const Uncached = createContext<Client | null>(null);

// useUncachedClient is the client without the cache (in tests without
// one: the usual client).
export function useUncachedClient(): Client {
  const c = useContext(Uncached);
  const fallback = useClient();
  return c ?? fallback;
}
