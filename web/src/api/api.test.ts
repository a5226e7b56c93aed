import { CombinedError } from '@urql/core';
import { describe, expect, it, vi } from 'vitest';
import { translator } from '../i18n';
import { backoff, resubscribing, wsUrl } from './client';
import { describe as describeError, fieldProblems, fromCombined, fromGraphQLErrors } from './errors';
import { markConnected, markLost, connection } from './session';
import { multipartBody, uploadHeaders } from './upload';

const t = translator('en');

describe('errors', () => {
  it('names both states of an illegal transition', () => {
    const [e] = fromGraphQLErrors([
      { message: 'task 1 cannot move from SUCCESS to RETRY_PENDING', extensions: { code: 'INVALID_TRANSITION', from: 'SUCCESS', to: 'RETRY_PENDING' } },
    ]);
    expect(describeError(e, t).title).toBe('Not allowed now: the task cannot move from Success to Retry pending.');
  });
  it('shows the reference of an internal error and nothing else', () => {
    const [e] = fromGraphQLErrors([{ message: 'internal error (reference abc)', extensions: { code: 'INTERNAL', reference: 'abc' } }]);
    expect(describeError(e, t)).toEqual({ title: 'Server error (reference abc).', details: [] });
  });
  it('lists validation problems and maps them to fields', () => {
    const errors = fromGraphQLErrors([
      {
        message: 'invalid request',
        extensions: {
          code: 'VALIDATION',
          problems: [
            { field: 'input', message: "at /sleepMs: minimum: got -1, want 0" },
            { field: 'input', message: 'url: scheme must be http or https, not "ftp"' },
            { field: 'maxAttempts', message: 'must be 1..25' },
          ],
        },
      },
    ]);
    expect(describeError(errors[0], t).details).toHaveLength(3);
    expect(fieldProblems(errors)).toEqual({
      'input.sleepMs': 'minimum: got -1, want 0',
      'input.url': 'scheme must be http or https, not "ftp"',
      maxAttempts: 'must be 1..25',
    });
  });
  it('tells a network failure and an HTTP 401 apart', () => {
    expect(fromCombined(new CombinedError({ networkError: new Error('Failed to fetch') }))[0].code).toBe('NETWORK');
    const unauth = new CombinedError({ networkError: new Error('Unauthorized'), response: { status: 401 } });
    expect(fromCombined(unauth)[0].code).toBe('UNAUTHENTICATED');
    expect(describeError({ code: 'WHAT', message: 'x', extensions: {} }, t).title).toBe('Something went wrong.');
  });
});

describe('connection', () => {
  it('backs off exponentially with jitter, capped', () => {
    expect(backoff(0, () => 0)).toBe(1000);
    expect(backoff(3, () => 0)).toBe(8000);
    expect(backoff(20, () => 0)).toBe(30000);
    expect(backoff(20, () => 1)).toBe(39000);
  });
  it('counts reconnects after a loss, so that pages refetch', () => {
    markConnected();
    const before = connection.get().epoch;
    markConnected();
    expect(connection.get().epoch).toBe(before);
    markLost(Date.now() + 1000);
    expect(connection.get().phase).toBe('lost');
    markConnected();
    expect(connection.get().epoch).toBe(before + 1);
    expect(connection.get().restoredAt).not.toBeNull();
  });
  it('derives the websocket URL from the page', () => {
    expect(wsUrl({ protocol: 'https:', host: 'ops.example:8443' })).toBe('wss://ops.example:8443/query');
    expect(wsUrl({ protocol: 'http:', host: '127.0.0.1:8080' })).toBe('ws://127.0.0.1:8080/query');
  });
});

describe('upload', () => {
  it('follows the GraphQL multipart request spec', async () => {
    const file = new File(['a,b\n1,2\n'], 'contacts.csv', { type: 'text/csv' });
    const form = multipartBody({ file, target: 'contacts', idempotencyKey: 'k1' });
    expect([...form.keys()]).toEqual(['operations', 'map', '0']);
    const ops = JSON.parse(String(form.get('operations')));
    expect(ops.variables).toEqual({ file: null, target: 'contacts', options: null, idempotencyKey: 'k1' });
    expect(ops.query).toContain('importFile(file: $file');
    expect(JSON.parse(String(form.get('map')))).toEqual({ '0': ['variables.file'] });
    expect((form.get('0') as File).name).toBe('contacts.csv');
  });

  it('sends a header no cross-site form can, and the token', () => {
    const h = uploadHeaders('t0k');
    expect(h['Apollo-Require-Preflight']).toBe('true');
    expect(h.Authorization).toBe('Bearer t0k');
  });
});

describe('resubscribing', () => {
  type R = { data?: unknown; errors?: { extensions?: Record<string, unknown> }[] };
  function fakeServer() {
    const streams: { sink: { next(v: R): void; error(e: unknown): void; complete(): void }; closed: boolean }[] = [];
    const subscribe = (sink: (typeof streams)[number]['sink']) => {
      const s = { sink, closed: false };
      streams.push(s);
      return () => {
        s.closed = true;
      };
    };
    return { streams, subscribe };
  }

  it('subscribes again after RESYNC_REQUIRED and tells the pages to re-read', () => {
    vi.useFakeTimers();
    const server = fakeServer();
    const got: R[] = [];
    let completed = false;
    let resyncs = 0;
    const stop = resubscribing<R>(server.subscribe, () => resyncs++, () => 1000)({
      next: (v) => got.push(v),
      error: () => {},
      complete: () => (completed = true),
    });
    server.streams[0].sink.next({ data: 1 });
    server.streams[0].sink.next({ errors: [{ extensions: { code: 'RESYNC_REQUIRED' } }] });
    server.streams[0].sink.complete();
    expect(got).toEqual([{ data: 1 }]);
    expect(completed).toBe(false);
    expect(resyncs).toBe(1);
    expect(server.streams).toHaveLength(1);
    vi.advanceTimersByTime(1000);
    expect(server.streams).toHaveLength(2);
    server.streams[1].sink.next({ data: 2 });
    expect(got).toEqual([{ data: 1 }, { data: 2 }]);
    stop();
    expect(server.streams[1].closed).toBe(true);
    vi.useRealTimers();
  });

  it('passes other errors and ends through', () => {
    const server = fakeServer();
    const errors: unknown[] = [];
    let completed = false;
    resubscribing<R>(server.subscribe, () => {
      throw new Error('no resync expected');
    })({ next: () => {}, error: (e) => errors.push(e), complete: () => (completed = true) });
    server.streams[0].sink.next({ errors: [{ extensions: { code: 'FORBIDDEN' } }] });
    server.streams[0].sink.error('boom');
    server.streams[0].sink.complete();
    expect(errors).toEqual(['boom']);
    expect(completed).toBe(true);
    expect(server.streams).toHaveLength(1);
  });

  it('does not subscribe again once the page has left', () => {
    vi.useFakeTimers();
    const server = fakeServer();
    const stop = resubscribing<R>(server.subscribe, () => {}, () => 1000)({ next: () => {}, error: () => {}, complete: () => {} });
    server.streams[0].sink.next({ errors: [{ extensions: { code: 'UNAVAILABLE' } }] });
    stop();
    vi.advanceTimersByTime(5000);
    expect(server.streams).toHaveLength(1);
    vi.useRealTimers();
  });
});
