// Types and queues: each task type's running and waiting instances, and its
// flow settings — a cluster-wide cap, a rate of starts, a pause (optionally
// until a time) — editable by operators. Counts follow committed changes.
import { useEffect, useMemo, useRef, useState, type FormEvent } from 'react';
import { gql, useMutation, useQuery, useSubscription } from 'urql';
import { fieldProblems, fromCombined } from '../api/errors';
import { ANY_TASK_UPDATED, PAUSE_TYPE, RESUME_TYPE, SET_TYPE_CONTROL, TYPE_CONTROLS, type TypeControl } from '../api/queries';
import { TimeChart } from '../components/Chart';
import { ErrorBox } from '../components/ErrorBox';
import { typeTrendsQuery } from '../lib/history';
import { useI18n } from '../i18n';
import { useOnReconnect } from '../lib/hooks';
import { formatDateTime, fromLocalInput } from '../lib/time';

export function Types() {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ typeControls: TypeControl[] }>({ query: TYPE_CONTROLS });
  const refetch = () => reexecute({ requestPolicy: 'network-only' });
  useOnReconnect(refetch);
  // Any committed change may move the counts: read them again, at most
  // once a second.
  const [sub] = useSubscription<{ taskUpdated: { id: string; status: string } }>({ query: ANY_TASK_UPDATED });
  const last = useRef(0);
  useEffect(() => {
    if (!sub.data) return;
    const wait = Math.max(0, last.current + 1000 - Date.now());
    const h = setTimeout(() => {
      last.current = Date.now();
      reexecute({ requestPolicy: 'network-only' });
    }, wait);
    return () => clearTimeout(h);
  }, [sub.data, reexecute]);
  const rows = res.data?.typeControls ?? [];
  const trends = useTrends(rows.map((c) => c.type), sub.data);
  return (
    <div className="page" data-testid="page-types">
      <h1>{t('types.title')}</h1>
      <p className="muted">{t('types.intro')}</p>
      {res.error && <ErrorBox error={res.error} />}
      <div className="type-cards">
        {rows.map((c) => (
          <TypeCard key={c.type} c={c} trend={trends[c.type]} />
        ))}
      </div>
    </div>
  );
}

type Trend = { start: string; succeeded: number; failed: number }[];

// useTrends reads each type's last 24 hours of finished executions (hours,
// taskHistory) in one query; it is read again when tasks moved, at most
// once a minute (an hour's bucket changes slowly).
function useTrends(types: string[], moved: unknown): Record<string, Trend | undefined> {
  const key = types.join('\n');
  const query = useMemo(() => gql(typeTrendsQuery(key ? key.split('\n').length : 0)), [key]);
  const [hour, setHour] = useState(() => Math.floor(Date.now() / 3_600_000));
  const variables = useMemo(() => {
    const to = (hour + 1) * 3_600_000;
    const v: Record<string, string> = { from: new Date(to - 24 * 3_600_000).toISOString(), to: new Date(to).toISOString() };
    (key ? key.split('\n') : []).forEach((t, i) => (v[`t${i}`] = t));
    return v;
  }, [key, hour]);
  const [res, reexecute] = useQuery<Record<string, Trend>>({ query, variables, pause: !key });
  // The window slides at the hour (a clock).
  useEffect(() => {
    const id = setTimeout(() => setHour(Math.floor(Date.now() / 3_600_000)), (hour + 1) * 3_600_000 - Date.now() + 50);
    return () => clearTimeout(id);
  }, [hour]);
  const last = useRef(0);
  useEffect(() => {
    if (!moved || Date.now() - last.current < 60_000) return;
    last.current = Date.now();
    reexecute({ requestPolicy: 'network-only' });
  }, [moved, reexecute]);
  return useMemo(() => {
    const out: Record<string, Trend | undefined> = {};
    (key ? key.split('\n') : []).forEach((t, i) => (out[t] = res.data?.[`t${i}`]));
    return out;
  }, [key, res.data]);
}

function TypeTrend({ type, trend }: { type: string; trend: Trend }) {
  const { t, locale } = useI18n();
  const xs = useMemo(() => trend.map((p) => new Date(p.start).getTime()), [trend]);
  const series = useMemo(() => [{ label: t('types.trendTitle'), color: '--accent', values: trend.map((p) => p.succeeded + p.failed) }], [trend, t]);
  const n = trend.reduce((m, p) => m + p.succeeded + p.failed, 0);
  return (
    <div className="type-trend" title={t('types.trendTitle')}>
      <TimeChart xs={xs} series={series} title={`${type}: ${t('types.trendTitle')}`} testId="type-trend" locale={locale} sparkline />
      <span className="muted small" data-testid="type-trend-total" data-total={n}>
        {t('types.trend', { n })}
      </span>
    </div>
  );
}

function num(s: string): number | null {
  if (s.trim() === '') return null;
  const n = Number(s);
  return Number.isInteger(n) ? n : NaN;
}

function TypeCard({ c, trend }: { c: TypeControl; trend?: Trend }) {
  const { t, locale } = useI18n();
  const [cap, setCap] = useState(c.maxRunning?.toString() ?? '');
  const [rate, setRate] = useState(c.rateLimit?.toString() ?? '');
  const [period, setPeriod] = useState(String(c.ratePeriodSeconds));
  const [until, setUntil] = useState('');
  const [setState, setControl] = useMutation(SET_TYPE_CONTROL);
  const [pauseState, pause] = useMutation(PAUSE_TYPE);
  const [resumeState, resume] = useMutation(RESUME_TYPE);
  const problems = fieldProblems(fromCombined(setState.error));
  const save = (e: FormEvent) => {
    e.preventDefault();
    void setControl({ type: c.type, input: { maxRunning: num(cap), rateLimit: num(rate), ratePeriodSeconds: num(period) } });
  };
  const error = setState.error ?? pauseState.error ?? resumeState.error;
  return (
    <section className="card type-card" data-testid={`type-${c.type}`}>
      <div className="page-head">
        <h2>{c.type}</h2>
        <span className={`chip ${c.paused ? 'chip-warn' : ''}`} data-testid="type-state">
          {c.paused ? (c.pausedUntil ? t('types.pausedUntil', { at: formatDateTime(c.pausedUntil, locale) }) : t('types.paused')) : t('types.running')}
        </span>
      </div>
      <p data-testid="type-counts">
        {t('types.counts', { running: c.running, waiting: c.waiting })}
        {c.maxRunning !== null && ` · ${t('types.atCap', { running: c.running, cap: c.maxRunning })}`}
        {c.rateLimit !== null && ` · ${t('types.rateUse', { n: c.startedInWindow, rate: c.rateLimit, period: c.ratePeriodSeconds })}`}
        {c.nextStartAt && ` · ${t('types.nextStart', { at: formatDateTime(c.nextStartAt, locale) })}`}
      </p>
      {trend && <TypeTrend type={c.type} trend={trend} />}
      <form className="row" onSubmit={save} noValidate>
        <label>
          {t('types.cap')}
          <input value={cap} onChange={(e) => setCap(e.target.value)} inputMode="numeric" placeholder="∞" data-testid="type-cap" />
          {problems.maxRunning && <span className="field-error">{problems.maxRunning}</span>}
        </label>
        <label>
          {t('types.rate')}
          <input value={rate} onChange={(e) => setRate(e.target.value)} inputMode="numeric" placeholder="∞" data-testid="type-rate" />
          {problems.rateLimit && <span className="field-error">{problems.rateLimit}</span>}
        </label>
        <label>
          {t('types.period')}
          <input value={period} onChange={(e) => setPeriod(e.target.value)} inputMode="numeric" data-testid="type-period" />
          {problems.ratePeriodSeconds && <span className="field-error">{problems.ratePeriodSeconds}</span>}
        </label>
        <button type="submit" className="btn" disabled={setState.fetching} data-testid="type-save">
          {t('types.save')}
        </button>
      </form>
      <div className="row">
        {c.paused ? (
          <button type="button" className="btn" onClick={() => void resume({ type: c.type })} data-testid="type-resume">
            {t('types.resume')}
          </button>
        ) : (
          <>
            <label>
              {t('types.until')}
              <input type="datetime-local" step="1" value={until} onChange={(e) => setUntil(e.target.value)} data-testid="type-until" />
            </label>
            <button type="button" className="btn" onClick={() => void pause({ type: c.type, until: fromLocalInput(until) })} data-testid="type-pause">
              {t('types.pause')}
            </button>
          </>
        )}
      </div>
      {error && <ErrorBox error={error} />}
      {c.updatedBy && (
        <p className="muted small">
          {t('types.updated', { who: c.updatedBy, at: formatDateTime(c.updatedAt, locale) })}
        </p>
      )}
    </section>
  );
}
