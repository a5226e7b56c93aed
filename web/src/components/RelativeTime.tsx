// RelativeTime: "12 s ago" that moves. It re-renders when its label
// changes (every second under a minute, then at each whole minute or hour:
// lib/time's nextTick), and shows the full time, with its zone, on hover.
import { useEffect, useState } from 'react';
import { useI18n } from '../i18n';
import { formatDateTime, nextTick, relative } from '../lib/time';

// useLabelClock is the time now, read again whenever a label relative to
// at (an ISO time) changes.
export function useLabelClock(at: string | null | undefined): number {
  const [now, setNow] = useState(() => Date.now());
  const ms = at ? new Date(at).getTime() : NaN;
  useEffect(() => {
    if (Number.isNaN(ms)) return;
    const id = setTimeout(() => setNow(Date.now()), nextTick(Date.now() - ms) + 5);
    return () => clearTimeout(id);
  }, [ms, now]);
  return now;
}

export function RelativeTime({ at, testId }: { at: string | null | undefined; testId?: string }) {
  const { t, locale } = useI18n();
  const now = useLabelClock(at);
  if (!at) return <>—</>;
  return (
    <time dateTime={at} title={formatDateTime(at, locale)} data-testid={testId}>
      {relative(at, now, t)}
    </time>
  );
}
