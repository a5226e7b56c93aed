import type { Translate } from '../i18n';

// Times are shown in the viewer's zone and locale (Intl), always with the
// zone's name: "02/12/2026, 14:31:02 UTC", "2026/12/02 22:31:02 GMT+8".

export function formatDateTime(iso: string | null | undefined, locale: string): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return new Intl.DateTimeFormat(locale, {
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
    timeZoneName: 'short',
  }).format(d);
}

// formatTime: a time of day to the millisecond, with the zone (log lines).
export function formatTime(iso: string, locale: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return new Intl.DateTimeFormat(locale, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    fractionalSecondDigits: 3,
    hourCycle: 'h23',
    timeZoneName: 'short',
  }).format(d);
}

// formatClock: hours and minutes, with the zone (charts).
export function formatClock(ms: number, locale: string): string {
  return new Intl.DateTimeFormat(locale, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZoneName: 'short' }).format(new Date(ms));
}

// nextTick says in how many milliseconds a relative label of a time diffMs
// away changes: every second under a minute, at the next whole minute
// under an hour, at the next whole hour beyond.
export function nextTick(diffMs: number): number {
  const a = Math.abs(diffMs);
  if (a < 60_000) return 1000 - (a % 1000) || 1000;
  if (a < 3_600_000) return 60_000 - (a % 60_000) || 60_000;
  return 3_600_000 - (a % 3_600_000) || 3_600_000;
}

// formatDuration: "850 ms", "12.3 s", "4 min 05 s", "2 h 03 min".
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

// age: the coarse size of a span, for "3 min ago".
export function age(ms: number, t: Translate): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return t('time.s', { n: s });
  const m = Math.floor(s / 60);
  if (m < 60) return t('time.m', { n: m });
  const h = Math.floor(m / 60);
  if (h < 48) return t('time.h', { n: h });
  return t('time.d', { n: Math.floor(h / 24) });
}

export function relative(iso: string | null | undefined, now: number, t: Translate): string {
  if (!iso) return '—';
  const d = new Date(iso).getTime();
  if (Number.isNaN(d)) return iso;
  // Up to a minute in the future is clock skew (or a label clock that has
  // not ticked yet), not a schedule.
  const diff = now - d > -60_000 ? Math.max(0, now - d) : now - d;
  return diff >= 0 ? t('time.ago', { v: age(diff, t) }) : t('time.in', { v: age(-diff, t) });
}

// toLocalInput turns an ISO time into a datetime-local input value.
export function toLocalInput(iso: string | null | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// fromLocalInput reads a datetime-local value (local time) as ISO.
export function fromLocalInput(v: string): string | null {
  if (!v) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}
