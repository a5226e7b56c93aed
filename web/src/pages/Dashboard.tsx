import { useCallback, useEffect, useMemo, useState } from 'react';
import { useQuery, useSubscription } from 'urql';
import { ANY_TASK_UPDATED, dashboardQuery, STATUSES, type TaskRow, type TaskStats } from '../api/queries';
import { ActionButtons } from '../components/ActionButtons';
import { FailureRateChart, ThroughputChart } from '../components/Charts';
import { HistoryPanel } from '../components/History';
import { CountText } from '../components/CountText';
import { ErrorBox } from '../components/ErrorBox';
import { REVIEW_QUEUE_STATS, type QueueStats } from '../api/review';
import { hasCode } from '../api/errors';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import { BUCKET_MS, BUCKETS, bucketEdges, edgeVariables, toBuckets } from '../lib/buckets';
import { useNow, useOnReconnect, useThrottle } from '../lib/hooks';
import { age, formatDateTime } from '../lib/time';
import { Link } from '../router';
import { RelativeTime, useLabelClock } from '../components/RelativeTime';

type DashboardData = {
  taskStats: TaskStats;
  oldest: { edges: { node: TaskRow }[] };
  failures: { totalCount: number; edges: { node: TaskRow }[] };
} & Record<string, { totalCount: number }>;

export function Dashboard() {
  const { t, locale } = useI18n();
  const now = useNow();
  const [clock, setClock] = useState(() => Date.now());
  const edges = useMemo(() => bucketEdges(clock), [clock]);
  const query = useMemo(() => dashboardQuery(BUCKETS), []);
  const variables = useMemo(() => edgeVariables(edges), [edges]);
  const [res, reexecute] = useQuery<DashboardData>({ query, variables });
  // The review queue's size and oldest item: a query of its own, so that
  // a server without the review API still shows the rest.
  const [review, reexecuteReview] = useQuery<{ reviewQueueStats: QueueStats }>({ query: REVIEW_QUEUE_STATS, variables: { where: null } });
  // Each tenant's share of the running work: a query of its own too.
  const [running, reexecuteRunning] = useQuery<{ runningByTenant: TenantRunning[] }>({ query: RUNNING_BY_TENANT });

  // The window slides when a bucket ends: a clock, not a poll for state.
  useEffect(() => {
    const next = edges[edges.length - 1] - Date.now() + 50;
    const id = setTimeout(() => setClock(Date.now()), Math.max(1000, Math.min(next, BUCKET_MS)));
    return () => clearTimeout(id);
  }, [edges]);

  // Moves of tasks re-read the history too (HistoryPanel).
  const [moved, setMoved] = useState(0);
  const refresh = useCallback(() => {
    setClock(Date.now());
    setMoved((n) => n + 1);
    reexecute({ requestPolicy: 'network-only' });
    reexecuteReview({ requestPolicy: 'network-only' });
    reexecuteRunning({ requestPolicy: 'network-only' });
  }, [reexecute, reexecuteReview, reexecuteRunning]);
  const throttled = useThrottle(refresh, 2000);
  // Every committed change of any task refreshes the counts (throttled).
  useSubscription({ query: ANY_TASK_UPDATED }, (_prev: unknown, data: unknown) => {
    throttled();
    return data;
  });
  useOnReconnect(refresh);

  const data = res.data;
  const buckets = useMemo(() => toBuckets(edges, data), [edges, data]);
  const stats = data?.taskStats;
  const count = (s: string) => stats?.byStatus.find((b) => b.status === s)?.count ?? 0;
  const counted = (s: string) => stats?.byStatus.find((b) => b.status === s) ?? { count: 0, low: 0, high: 0 };
  const oldest = data?.oldest.edges[0]?.node;
  const failures = data?.failures.edges.map((e) => e.node) ?? [];
  const anyFinished = buckets.some((b) => b.succeeded + b.failed > 0);
  const types = useMemo(() => (stats?.byType ?? []).map((b) => b.type).sort(), [stats]);

  return (
    <div className="page" data-testid="page-dashboard">
      <h1>{t('dash.title')}</h1>
      {res.error && <ErrorBox error={res.error} />}
      {!data && res.fetching && <p className="muted">{t('common.loading')}</p>}

      <section aria-labelledby="by-state">
        <h2 id="by-state">{t('dash.byState')}</h2>
        <div className="stat-grid">
          <Link to="/tasks" className="stat stat-total" data-testid="count-total">
            <span className="stat-value">
              {stats ? <CountText c={{ count: stats.total, low: stats.totalLow, high: stats.totalHigh }} exact={stats.exact} sampled={stats.sampled} /> : '—'}
            </span>
            <span className="stat-label">{t('dash.total')}</span>
          </Link>
          {STATUSES.map((s) => (
            <Link key={s} to={`/tasks?status=${s}`} className={`stat stat-${s.toLowerCase()}`} data-testid={`count-${s}`} data-count={count(s)}>
              <span className="stat-value">{stats ? <CountText c={counted(s)} exact={stats.exact} sampled={stats.sampled} /> : '—'}</span>
              <span className="stat-label">{t(`status.${s}` as MessageKey)}</span>
            </Link>
          ))}
        </div>
      </section>

      <div className="grid-2">
        <section className="card" aria-labelledby="throughput">
          <h2 id="throughput">{t('dash.throughput')}</h2>
          <ThroughputChart buckets={buckets} locale={locale} labels={{ succeeded: t('dash.succeeded'), failed: t('dash.failed'), title: t('dash.throughput') }} />
          <div className="legend">
            <span className="legend-item legend-success">{t('dash.succeeded')}</span>
            <span className="legend-item legend-failed">{t('dash.failed')}</span>
          </div>
        </section>
        <section className="card" aria-labelledby="failure-rate">
          <h2 id="failure-rate">{t('dash.failureRate')}</h2>
          <FailureRateChart buckets={buckets} locale={locale} title={t('dash.failureRate')} />
          {!anyFinished && <p className="muted small">{t('dash.noData')}</p>}
        </section>
      </div>

      <HistoryPanel types={types} refreshKey={moved} />

      <div className="grid-2">
        <section className="card" aria-labelledby="oldest" data-testid="oldest-pending">
          <h2 id="oldest">{t('dash.oldestPending')}</h2>
          {oldest ? (
            <div className="oldest">
              <Link to={`/tasks/${oldest.id}`} className="mono">
                {oldest.code}
              </Link>{' '}
              <StatusChip status={oldest.status} />
              <div className="muted">
                {oldest.title || oldest.type} · <WaitingFor since={oldest.createdAt} />
              </div>
            </div>
          ) : (
            <p className="muted">{data ? t('dash.noPending') : '—'}</p>
          )}
        </section>
        <section className="card" aria-labelledby="failures" data-testid="recent-failures">
          <h2 id="failures">
            {t('dash.recentFailures')}
            {data && data.failures.totalCount > 0 && (
              <Link to="/tasks?status=FAILED&sort=FINISHED_AT" className="small count-link">
                {data.failures.totalCount}
              </Link>
            )}
          </h2>
          {failures.length === 0 ? (
            <p className="muted">{data ? t('dash.noFailures') : '—'}</p>
          ) : (
            <ul className="failure-list">
              {failures.map((f) => (
                <li key={f.id}>
                  <div className="failure-head">
                    <Link to={`/tasks/${f.id}`} className="mono">
                      {f.code}
                    </Link>
                    <span className="muted small">
                      <RelativeTime at={f.finishedAt} />
                    </span>
                    <ActionButtons task={f} small />
                  </div>
                  {f.lastError && <div className="error-text small" title={f.lastError}>{f.lastError}</div>}
                </li>
              ))}
            </ul>
          )}
        </section>
      </div>

      {!hasCode(review.error, 'GRAPHQL_VALIDATION_FAILED') && <ReviewCard stats={review.data?.reviewQueueStats} now={now} />}
      {!hasCode(running.error, 'GRAPHQL_VALIDATION_FAILED') && <TenantShareCard rows={running.data?.runningByTenant} />}

      <section className="card" aria-labelledby="by-type">
        <h2 id="by-type">{t('dash.byType')}</h2>
        <div className="table-wrap">
          <table className="table" data-testid="by-type">
            <thead>
              <tr>
                <th>{t('dash.type')}</th>
                <th className="num">{t('dash.total')}</th>
                {STATUSES.map((s) => (
                  <th key={s} className="num">
                    {t(`status.${s}` as MessageKey)}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {(stats?.byType ?? []).map((row) => (
                <tr key={row.type}>
                  <td>
                    <Link to={`/tasks?type=${encodeURIComponent(row.type)}`}>{row.type}</Link>
                  </td>
                  <td className="num">{row.count}</td>
                  {STATUSES.map((s) => (
                    <td key={s} className="num">
                      {row.byStatus.find((b) => b.status === s)?.count ?? 0}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
    </div>
  );
}

// WaitingFor: "waiting for 12 s", moving.
function WaitingFor({ since }: { since: string }) {
  const { t, locale } = useI18n();
  const now = useLabelClock(since);
  return (
    <time dateTime={since} title={formatDateTime(since, locale)} data-testid="oldest-waiting">
      {t('dash.waitingFor', { age: age(now - new Date(since).getTime(), t) })}
    </time>
  );
}

/** How many instances run now per tenant, as runningByTenant answers. */
export type TenantRunning = { tenant: string; running: number };

export const RUNNING_BY_TENANT = `query RunningByTenant { runningByTenant { tenant running } }`;

/** TenantShareCard shows each tenant's share of the work running now. */
export function TenantShareCard({ rows }: { rows: TenantRunning[] | undefined }) {
  const { t } = useI18n();
  const total = (rows ?? []).reduce((n, r) => n + r.running, 0);
  return (
    <section className="card" aria-labelledby="tenant-share" data-testid="dash-tenant-share" data-total={rows ? total : ''}>
      <h2 id="tenant-share">{t('dash.tenantShare')}</h2>
      {!rows ? (
        <p className="muted">{t('common.loading')}</p>
      ) : rows.length === 0 ? (
        <p className="muted">{t('dash.tenantShareNone')}</p>
      ) : (
        <ul className="share-list">
          {rows.map((r) => {
            const pct = Math.round((100 * r.running) / total);
            return (
              <li key={r.tenant} data-testid="tenant-share-row" data-tenant={r.tenant} data-running={r.running}>
                <span className="share-name">{r.tenant === '' ? t('dash.noTenant') : r.tenant}</span>
                <span className="share-bar" aria-hidden="true">
                  <span style={{ width: `${pct}%` }} />
                </span>
                <span className="num">{t('dash.tenantShareRow', { running: r.running, pct })}</span>
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}

function ReviewCard({ stats, now }: { stats: QueueStats | undefined; now: number }) {
  const { t, locale } = useI18n();
  const oldest = stats?.oldest;
  return (
    <section className="card" aria-labelledby="review-queue" data-testid="dash-review" data-size={stats?.size ?? ''}>
      <h2 id="review-queue">
        <Link to="/review">{t('dash.review')}</Link>
      </h2>
      {!stats ? (
        <p className="muted">—</p>
      ) : stats.size === 0 ? (
        <p className="muted" data-testid="dash-review-empty">
          {t('dash.reviewEmpty')}
        </p>
      ) : (
        <div className="oldest">
          <Link to="/review" className="stat-value" data-testid="dash-review-size">
            {t('dash.reviewSize', { n: stats.size })}
          </Link>
          {stats.overdue > 0 && (
            <div className="error-text small" data-testid="dash-review-overdue">
              {t('dash.reviewOverdue', { n: stats.overdue })}
            </div>
          )}
          {oldest && stats.oldestSince && (
            <div className="muted" data-testid="dash-review-oldest" title={formatDateTime(stats.oldestSince, locale)}>
              <Link to={`/review?open=${encodeURIComponent(oldest.id)}`} className="mono">
                {t('dash.reviewOldest', { code: oldest.code, age: age(now - new Date(stats.oldestSince).getTime(), t) })}
              </Link>
            </div>
          )}
        </div>
      )}
    </section>
  );
}
