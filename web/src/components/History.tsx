// The dashboard's history: a range picker (1 h, 24 h, 7 d, 30 d, custom)
// and a type selector driving charts read from taskHistory (docs/history.md):
// throughput, created vs started, waiting depth, wait and run times.
import { useEffect, useMemo, useRef, useState } from 'react';
import { gql, useQuery } from 'urql';
import { useI18n, type MessageKey } from '../i18n';
import { columns, PRESETS, RESOLUTION_MS, rangeWindow, TASK_HISTORY, totals, type HistoryPoint, type RangeId, type RangeProblem } from '../lib/history';
import { formatDuration, fromLocalInput, toLocalInput } from '../lib/time';
import { TimeChart, type ChartSeries } from './Chart';
import { CostPanel } from './Cost';
import { DeadlinesPanel } from './Deadlines';
import { ErrorBox } from './ErrorBox';

const HISTORY = gql(TASK_HISTORY);

/** The picker's choice: a preset, or a custom range (ISO ends). */
export interface RangeChoice {
  id: RangeId;
  from: string | null;
  to: string | null;
}

/** RangePicker: the presets as toggles, and from/to inputs for a custom range. */
export function RangePicker({ value, onChange }: { value: RangeChoice; onChange: (v: RangeChoice) => void }) {
  const { t } = useI18n();
  const ids: RangeId[] = [...PRESETS.map((p) => p.id), 'custom'];
  return (
    <div className="range-picker" role="group" aria-label={t('hist.range')} data-testid="range-picker" data-range={value.id}>
      {ids.map((id) => (
        <button
          key={id}
          type="button"
          aria-pressed={value.id === id}
          className={`chip-toggle ${value.id === id ? 'on chip-executing' : ''}`}
          onClick={() => {
            // A custom range starts as the last 24 hours.
            const now = Date.now();
            onChange(id === 'custom' ? { id, from: value.from ?? new Date(now - 86_400_000).toISOString(), to: value.to ?? new Date(now).toISOString() } : { ...value, id });
          }}
          data-testid={`range-${id}`}
        >
          {t(`hist.range.${id}` as MessageKey)}
        </button>
      ))}
      {value.id === 'custom' && (
        <>
          <label className="inline small">
            {t('hist.from')}
            <input type="datetime-local" value={toLocalInput(value.from)} onChange={(e) => onChange({ ...value, from: fromLocalInput(e.target.value) })} data-testid="range-from" />
          </label>
          <label className="inline small">
            {t('hist.to')}
            <input type="datetime-local" value={toLocalInput(value.to)} onChange={(e) => onChange({ ...value, to: fromLocalInput(e.target.value) })} data-testid="range-to" />
          </label>
        </>
      )}
    </div>
  );
}

// The history is written by each node every 5 s, and minutes are rolled up
// into hours and days once a minute: after a task event the history is
// read at once, after the next flush, and (hours, days) after the roll-up.
const FLUSH_MS = 6_000;
const ROLLUP_MS = 65_000;

/**
 * HistoryPanel: the charts of the chosen range and type. refreshKey
 * changes when tasks moved (the dashboard's throttled events).
 */
export function HistoryPanel({ types, refreshKey }: { types: string[]; refreshKey: number }) {
  const { t, locale } = useI18n();
  const [range, setRange] = useState<RangeChoice>({ id: '1h', from: null, to: null });
  const [type, setType] = useState('');
  const [clock, setClock] = useState(() => Date.now());
  const win = useMemo(() => rangeWindow(range.id, clock, { from: range.from, to: range.to }), [range, clock]);
  const ok = 'resolution' in win;
  const variables = useMemo(() => (ok ? { ...win, type: type || null } : {}), [ok, win, type]);
  const [res, reexecute] = useQuery<{ taskHistory: HistoryPoint[] }>({ query: HISTORY, variables, pause: !ok });

  // A preset slides when its last bucket ends (a clock, not a poll).
  useEffect(() => {
    if (!ok || range.id === 'custom') return;
    const next = new Date(win.to).getTime() - Date.now() + 50;
    const id = setTimeout(() => setClock(Date.now()), Math.max(1000, Math.min(next, RESOLUTION_MS[win.resolution])));
    return () => clearTimeout(id);
  }, [ok, win, range.id]);
  const first = useRef(refreshKey);
  const minutes = ok && win.resolution === 'MINUTE';
  useEffect(() => {
    if (refreshKey === first.current) return;
    setClock(Date.now());
    reexecute({ requestPolicy: 'network-only' });
    const ids = [FLUSH_MS, ...(minutes ? [] : [ROLLUP_MS])].map((ms) => setTimeout(() => reexecute({ requestPolicy: 'network-only' }), ms));
    return () => ids.forEach(clearTimeout);
  }, [refreshKey, reexecute, minutes]);

  const points = useMemo(() => res.data?.taskHistory ?? [], [res.data]);
  const sum = useMemo(() => totals(points), [points]);
  const charts = useMemo(() => {
    const c = columns(points, ['succeeded', 'failed', 'cancelled', 'created', 'started', 'waiting', 'waitP50Ms', 'waitP95Ms', 'runP50Ms', 'runP95Ms']);
    const s = (key: MessageKey, color: string, values: (number | null)[]): ChartSeries => ({ label: t(key), color, values });
    return {
      xs: c.xs,
      throughput: [s('dash.succeeded', '--ok', c.succeeded), s('dash.failed', '--danger', c.failed), s('hist.cancelled', '--warn', c.cancelled)],
      flow: [s('hist.created', '--accent', c.created), s('hist.started', '--ok', c.started)],
      waiting: [s('hist.waiting', '--warn', c.waiting)],
      wait: [s('hist.p50', '--accent', c.waitP50Ms), s('hist.p95', '--danger', c.waitP95Ms)],
      run: [s('hist.p50', '--accent', c.runP50Ms), s('hist.p95', '--danger', c.runP95Ms)],
    };
  }, [points, t]);
  const problem: RangeProblem | null = ok ? null : win.problem;
  const ms = (v: number) => (v === 0 ? '0' : formatDuration(v));
  const card = (id: string, title: MessageKey, series: ChartSeries[], yFormat?: (v: number) => string) => (
    <section className="card" aria-labelledby={`hist-${id}-h`}>
      <h3 id={`hist-${id}-h`}>{t(title)}</h3>
      <TimeChart xs={charts.xs} series={series} title={t(title)} testId={`hist-${id}`} locale={locale} yFormat={yFormat} />
    </section>
  );

  return (
    <section
      className="history"
      aria-labelledby="history-h"
      data-testid="history"
      data-from={ok ? win.from : ''}
      data-to={ok ? win.to : ''}
      data-resolution={ok ? win.resolution : ''}
      data-type={type}
      data-loaded={res.data && !res.fetching ? 'true' : 'false'}
    >
      <div className="section-head">
        <h2 id="history-h">{t('hist.title')}</h2>
        <label className="inline small">
          {t('hist.type')}
          <select value={type} onChange={(e) => setType(e.target.value)} data-testid="history-type">
            <option value="">{t('hist.allTypes')}</option>
            {types.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </label>
      </div>
      <RangePicker value={range} onChange={setRange} />
      {problem && (
        <p className="field-error" role="alert" data-testid="range-problem">
          {t(`hist.problem.${problem}` as MessageKey)}
        </p>
      )}
      {res.error && <ErrorBox error={res.error} />}
      <p className="muted small" data-testid="hist-totals" {...Object.fromEntries(Object.entries(sum).map(([k, v]) => [`data-${k}`, v]))}>
        {t('hist.totals', { ...sum })}
      </p>
      <div className="grid-2">
        {card('throughput', 'hist.throughput', charts.throughput)}
        {card('flow', 'hist.flow', charts.flow)}
        {card('waiting', 'hist.waitingDepth', charts.waiting)}
        {card('wait', 'hist.waitTime', charts.wait, ms)}
        {card('run', 'hist.runTime', charts.run, ms)}
      </div>
      {ok && <CostPanel from={win.from} to={win.to} refreshKey={refreshKey} />}
      {ok && <DeadlinesPanel from={win.from} to={win.to} refreshKey={refreshKey} />}
    </section>
  );
}
