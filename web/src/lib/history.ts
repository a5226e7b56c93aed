// The dashboard's time range (1 h, 24 h, 7 d, 30 d or a custom from/to) as
// taskHistory's arguments, and its answer as chart series.

/** The width of a bucket of the task history (graph/schema/history.graphql). */
export type Resolution = 'MINUTE' | 'HOUR' | 'DAY';

/** A bucket's width in milliseconds. */
export const RESOLUTION_MS: Record<Resolution, number> = { MINUTE: 60_000, HOUR: 3_600_000, DAY: 86_400_000 };

/** The server's limit of buckets in one read. */
export const MAX_BUCKETS = 1500;

/** A preset range of the picker, or a custom one. */
export type RangeId = '1h' | '24h' | '7d' | '30d' | 'custom';

/** The presets, by their length. */
export const PRESETS: { id: Exclude<RangeId, 'custom'>; ms: number }[] = [
  { id: '1h', ms: 3_600_000 },
  { id: '24h', ms: 24 * 3_600_000 },
  { id: '7d', ms: 7 * 24 * 3_600_000 },
  { id: '30d', ms: 30 * 24 * 3_600_000 },
];

/** taskHistory's range: [from, to) at a resolution. */
export interface HistoryWindow {
  from: string;
  to: string;
  resolution: Resolution;
}

/** Why a custom range cannot be read. */
export type RangeProblem = 'missing' | 'order' | 'tooLong';

// resolutionFor picks the bucket as the server does by default: minutes up
// to 6 hours, hours up to 14 days, days beyond.
export function resolutionFor(spanMs: number): Resolution {
  if (spanMs <= 6 * 3_600_000) return 'MINUTE';
  if (spanMs <= 14 * 86_400_000) return 'HOUR';
  return 'DAY';
}

const floorTo = (t: number, step: number) => Math.floor(t / step) * step;
const ceilTo = (t: number, step: number) => Math.ceil(t / step) * step;

/**
 * rangeWindow is the range's buckets: a preset ends with the bucket that
 * holds now (so the current minute, hour or day is drawn as it fills) and
 * starts the preset's length before; a custom range is widened to whole
 * buckets. A custom range needs both ends, from before to, and at most
 * MAX_BUCKETS buckets.
 */
export function rangeWindow(id: RangeId, now: number, custom?: { from: string | null; to: string | null }): HistoryWindow | { problem: RangeProblem } {
  if (id !== 'custom') {
    const ms = PRESETS.find((p) => p.id === id)!.ms;
    const resolution = resolutionFor(ms);
    const to = floorTo(now, RESOLUTION_MS[resolution]) + RESOLUTION_MS[resolution];
    return { from: new Date(to - ms).toISOString(), to: new Date(to).toISOString(), resolution };
  }
  const f = custom?.from ? new Date(custom.from).getTime() : NaN;
  const t = custom?.to ? new Date(custom.to).getTime() : NaN;
  if (Number.isNaN(f) || Number.isNaN(t)) return { problem: 'missing' };
  if (t <= f) return { problem: 'order' };
  const resolution = resolutionFor(t - f);
  const step = RESOLUTION_MS[resolution];
  const from = floorTo(f, step);
  const to = ceilTo(t, step);
  if ((to - from) / step > MAX_BUCKETS) return { problem: 'tooLong' };
  return { from: new Date(from).toISOString(), to: new Date(to).toISOString(), resolution };
}

/** One bucket of taskHistory, as the dashboard reads it. */
export interface HistoryPoint {
  start: string;
  created: number;
  started: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  retries: number;
  waiting: number;
  waitP50Ms: number | null;
  waitP95Ms: number | null;
  runP50Ms: number | null;
  runP95Ms: number | null;
}

/** A field of HistoryPoint that is a number. */
export type HistoryField = Exclude<keyof HistoryPoint, 'start'>;

/** The buckets' starts (ms) and one column per field asked for. */
export function columns<F extends HistoryField>(points: HistoryPoint[], fields: F[]): { xs: number[] } & Record<F, (number | null)[]> {
  const out: Record<string, (number | null)[]> = { xs: points.map((p) => new Date(p.start).getTime()) };
  for (const f of fields) out[f] = points.map((p) => p[f]);
  return out as { xs: number[] } & Record<F, (number | null)[]>;
}

/** The sums over the range of the counted fields. */
export function totals(points: HistoryPoint[]): Record<'created' | 'started' | 'succeeded' | 'failed' | 'cancelled' | 'retries', number> {
  const t = { created: 0, started: 0, succeeded: 0, failed: 0, cancelled: 0, retries: 0 };
  for (const p of points) for (const k of Object.keys(t) as (keyof typeof t)[]) t[k] += p[k];
  return t;
}

const POINT = 'start created started succeeded failed cancelled retries waiting waitP50Ms waitP95Ms runP50Ms runP95Ms';

/** The dashboard's history read. */
export const TASK_HISTORY = `
  query TaskHistory($from: Time!, $to: Time!, $resolution: HistoryResolution, $type: String) {
    taskHistory(from: $from, to: $to, resolution: $resolution, type: $type) { ${POINT} }
  }
`;

/** The Types page's trend lines: the last 24 hours of each type, aliased t0..tN. */
export function typeTrendsQuery(n: number): string {
  const vars = Array.from({ length: n }, (_, i) => `$t${i}: String`).join(', ');
  const fields = Array.from({ length: n }, (_, i) => `t${i}: taskHistory(from: $from, to: $to, resolution: HOUR, type: $t${i}) { start succeeded failed }`).join('\n');
  if (n === 0) return 'query TypeTrends { __typename }';
  return `query TypeTrends($from: Time!, $to: Time!, ${vars}) { ${fields} }`;
}
