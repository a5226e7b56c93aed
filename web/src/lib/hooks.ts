import { useEffect, useRef, useState } from 'react';
import { type AnyVariables, type DocumentInput, type OperationResult } from 'urql';
import { useUncachedClient } from '../api/client';
import { useConnection } from '../api/session';

// useNow ticks for relative times ("3 min ago"). It is a clock for labels,
// not a poll: no request depends on it.
export function useNow(intervalMs = 15_000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const id = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(id);
  }, [intervalMs]);
  return now;
}

// useThrottle returns a function that calls fn at most once per waitMs,
// trailing: a burst of events becomes one refresh shortly after it starts,
// then at most one per window while it lasts.
export function useThrottle(fn: () => void, waitMs: number): () => void {
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const last = useRef(0);
  useEffect(() => () => {
    if (timer.current) clearTimeout(timer.current);
  }, []);
  const ref = useRef(() => {
    if (timer.current) return;
    const wait = Math.max(250, last.current + waitMs - Date.now());
    timer.current = setTimeout(() => {
      timer.current = null;
      last.current = Date.now();
      fnRef.current();
    }, wait);
  });
  return ref.current;
}

// useOnReconnect calls fn after the websocket came back from a loss, or
// after the server ended a subscription with RESYNC_REQUIRED (markResync):
// events may have been missed, so what is shown is fetched again.
export function useOnReconnect(fn: () => void) {
  const { epoch } = useConnection();
  const first = useRef(epoch);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  useEffect(() => {
    if (epoch !== first.current) fnRef.current();
  }, [epoch]);
}

// useEvents calls onEvent with each result of a subscription, on the
// client without the cache and without re-rendering the component for it
// (useSubscription keeps every event in state: one render per event, too
// many for a 10,000-step workflow whose steps all move at once). The
// subscription restarts when key changes; paused, there is none.
export function useEvents<D>(query: DocumentInput<D, AnyVariables>, variables: AnyVariables, key: string, pause: boolean, onEvent: (r: OperationResult<D>) => void) {
  const client = useUncachedClient();
  const fn = useRef(onEvent);
  fn.current = onEvent;
  const vars = useRef(variables);
  vars.current = variables;
  useEffect(() => {
    if (pause) return;
    const sub = client.subscription<D>(query, vars.current).subscribe((r) => fn.current(r));
    return () => sub.unsubscribe();
  }, [client, query, key, pause]);
}
