// The review queue: the tasks waiting in REVIEW_PENDING that the viewer
// may see, oldest first, filtered by type, tenant and age (kept in the
// URL), paged the Relay way. It stays live through taskUpdated: an item
// that is decided (here, elsewhere, by the deadline) leaves the page, a
// task entering review under the filter arrives. An item opens in place
// to show its evidence and the decisions (components/ReviewPanel). Bulk
// approve/reject act on everything matching the filter, after the number
// is typed, as the task list's bulk actions do.
import { useCallback, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import { useClient, useMutation, useQuery, useSubscription } from 'urql';
import { fromCombined, type ApiError } from '../api/errors';
import { TASK_TYPES, type ActionResult, type TaskType } from '../api/queries';
import {
  APPROVE_REVIEWS,
  REJECT_REVIEWS,
  REVIEW_QUEUE,
  REVIEW_QUEUE_IDS,
  REVIEW_QUEUE_STATS,
  REVIEW_ROW_UPDATED,
  type QueueData,
  type QueueRow,
  type QueueStats,
} from '../api/review';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { ErrorBox } from '../components/ErrorBox';
import { ReviewPanel } from '../components/ReviewPanel';
import { useI18n, type MessageKey } from '../i18n';
import { useNow, useOnReconnect, useThrottle } from '../lib/hooks';
import { AGES, reviewFilterToSearch, reviewLiveWhere, reviewVariables, parseReviewFilter, REVIEW_PAGE_SIZE, type AgePreset, type ReviewFilter } from '../lib/review';
import { formatDateTime, relative } from '../lib/time';
import { Link, navigate, useLocation } from '../router';

export function ReviewQueue() {
  const { t, locale } = useI18n();
  const { search } = useLocation();
  const f = useMemo(() => parseReviewFilter(search), [search]);
  const now = useNow();
  const setFilter = useCallback((next: ReviewFilter, replace = false) => navigate('/review' + reviewFilterToSearch(next), { replace }), []);
  const update = (patch: Partial<ReviewFilter>, replace = false) => setFilter({ ...f, after: '', before: '', page: 1, open: '', ...patch }, replace);

  const variables = useMemo(() => reviewVariables(f), [f]);
  const where = variables.where;
  const statsVars = useMemo(() => ({ where }), [where]);
  const [res, reexecute] = useQuery<QueueData>({ query: REVIEW_QUEUE, variables, requestPolicy: 'cache-and-network' });
  const [stats, reexecuteStats] = useQuery<{ reviewQueueStats: QueueStats }>({ query: REVIEW_QUEUE_STATS, variables: statsVars, requestPolicy: 'cache-and-network' });
  const [types] = useQuery<{ taskTypes: TaskType[] }>({ query: TASK_TYPES });

  const rows = useMemo(() => res.data?.reviewQueue.edges.map((e) => e.node) ?? [], [res.data]);
  const ids = useMemo(() => rows.map((r) => r.id), [rows]);
  const refetch = useCallback(() => {
    reexecute({ requestPolicy: 'network-only' });
    reexecuteStats({ requestPolicy: 'network-only' });
  }, [reexecute, reexecuteStats]);
  const throttledRefetch = useThrottle(refetch, 1000);
  useOnReconnect(refetch);

  // Live: an item on screen that leaves review, or a task that enters it,
  // reads the queue again (the server says what matches and in which order).
  const idsRef = useRef(ids);
  idsRef.current = ids;
  const liveVars = useMemo(() => ({ where: reviewLiveWhere(f, ids) }), [f, ids]);
  useSubscription({ query: REVIEW_ROW_UPDATED, variables: liveVars }, (_prev: unknown, data: { taskUpdated: QueueRow }) => {
    const task = data?.taskUpdated;
    if (task && (!idsRef.current.includes(task.id) || task.status !== 'REVIEW_PENDING')) throttledRefetch();
    return data;
  });

  // The item just decided leaves the queue; a notice links to its task.
  const [last, setLast] = useState<{ id: string; code: string } | null>(null);
  const decided = (row: QueueRow) => {
    setLast({ id: row.id, code: row.code });
    setFilter({ ...f, open: '' }, true);
    refetch();
  };

  const conn = res.data?.reviewQueue;
  const pageInfo = conn?.pageInfo;
  const hasPrev = f.before ? !!pageInfo?.hasPreviousPage : !!f.after;
  const hasNext = f.before ? true : !!pageInfo?.hasNextPage;
  const s = stats.data?.reviewQueueStats;
  // A viewer's items offer no decision: no bulk button either.
  const canApprove = rows.some((r) => r.availableActions.includes('APPROVE_REVIEW'));
  const canReject = rows.some((r) => r.availableActions.includes('REJECT_REVIEW'));
  const filtered = !!(f.type || f.tenant || f.age);

  return (
    <div className="page" data-testid="page-review">
      <h1>{t('review.title')}</h1>
      <p className="muted">{t('review.intro')}</p>
      <Filters f={f} update={update} types={types.data?.taskTypes ?? []} />

      <div className="review-stats" data-testid="review-stats" data-size={s?.size ?? ''} data-overdue={s?.overdue ?? ''}>
        {s && (
          <span>
            {t('review.stats', { size: s.size, overdue: s.overdue })}
            {s.oldestSince && (
              <span className="muted" title={formatDateTime(s.oldestSince, locale)}>
                {' · '}
                {t('review.oldestSince', { at: relative(s.oldestSince, now, t) })}
              </span>
            )}
          </span>
        )}
        {stats.error && <ErrorBox error={stats.error} />}
      </div>

      {last && (
        <div className="notice" role="status" data-testid="review-decided" data-task-id={last.id}>
          {t('review.decidedNotice', { code: last.code })}{' '}
          <Link to={`/tasks/${last.id}`} data-testid="review-decided-link">
            {t('review.openTask')}
          </Link>{' '}
          <button type="button" className="btn btn-ghost btn-small" onClick={() => setLast(null)}>
            {t('err.dismiss')}
          </button>
        </div>
      )}
      {/* Always mounted: its result stays when the queue it emptied has no button left. */}
      <BulkDecision where={where} canApprove={canApprove} canReject={canReject} onDone={refetch} />
      {res.error && <ErrorBox error={res.error} />}

      <div className="table-wrap">
        <table className="table review-table" data-testid="review-table" aria-busy={res.fetching}>
          <thead>
            <tr>
              <th>{t('review.col.code')}</th>
              <th>{t('review.col.title')}</th>
              <th>{t('review.col.type')}</th>
              <th>{t('review.col.tenant')}</th>
              <th>{t('review.col.submitter')}</th>
              <th>{t('review.col.why')}</th>
              <th>{t('review.col.waiting')}</th>
              <th>{t('review.col.deadline')}</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => {
              const open = f.open === r.id;
              const since = r.review?.since ?? r.updatedAt;
              return (
                <QueueItem key={r.id} row={r} open={open} onToggle={() => setFilter({ ...f, open: open ? '' : r.id }, true)} onDecided={decided}>
                  <td data-label={t('review.col.code')} className="cell-code">
                    <Link to={`/tasks/${r.id}`} className="mono" data-testid="review-task-link">
                      {r.code}
                    </Link>
                  </td>
                  <td data-label={t('review.col.title')} className="ellipsis" title={r.title}>
                    {r.title || <span className="muted">—</span>}
                  </td>
                  <td data-label={t('review.col.type')}>{r.type}</td>
                  <td data-label={t('review.col.tenant')}>{r.tenant || <span className="muted">—</span>}</td>
                  <td data-label={t('review.col.submitter')}>{r.review?.submittedBy ?? r.owner}</td>
                  <td data-label={t('review.col.why')} className="ellipsis" title={r.review?.reason ?? r.lastError ?? ''}>
                    {r.review && <span className="badge">{t(`review.trigger.${r.review.trigger}` as MessageKey)}</span>} <span className="small">{r.review?.reason ?? r.lastError}</span>
                  </td>
                  <td data-label={t('review.col.waiting')} title={formatDateTime(since, locale)} data-testid="review-waiting">
                    {relative(since, now, t)}
                  </td>
                  <td data-label={t('review.col.deadline')}>
                    {r.review?.deadline ? (
                      <span className={r.review.overdue ? 'error-text' : ''} title={formatDateTime(r.review.deadline, locale)}>
                        {relative(r.review.deadline, now, t)}
                      </span>
                    ) : (
                      <span className="muted">—</span>
                    )}
                  </td>
                </QueueItem>
              );
            })}
          </tbody>
        </table>
        {conn && rows.length === 0 && (
          <p className="empty" data-testid="review-empty">
            {filtered ? t('review.emptyFiltered') : t('review.empty')}
          </p>
        )}
        {!conn && res.fetching && <p className="muted">{t('common.loading')}</p>}
      </div>

      <div className="pager">
        <span className="muted" data-testid="review-range">
          {conn && rows.length > 0
            ? t('list.range.of', { from: (f.page - 1) * REVIEW_PAGE_SIZE + 1, to: (f.page - 1) * REVIEW_PAGE_SIZE + rows.length, total: conn.totalCount })
            : ''}
        </span>
        <button type="button" className="btn btn-small" disabled={!hasPrev} onClick={() => update({})} data-testid="review-page-first">
          {t('list.first')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasPrev || !pageInfo?.startCursor}
          onClick={() => setFilter({ ...f, after: '', before: pageInfo?.startCursor ?? '', page: Math.max(1, f.page - 1), open: '' })}
          data-testid="review-page-prev"
        >
          {t('list.prev')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasNext || !pageInfo?.endCursor}
          onClick={() => setFilter({ ...f, before: '', after: pageInfo?.endCursor ?? '', page: f.page + 1, open: '' })}
          data-testid="review-page-next"
        >
          {t('list.next')}
        </button>
      </div>
    </div>
  );
}

function QueueItem({ row, open, onToggle, onDecided, children }: { row: QueueRow; open: boolean; onToggle: () => void; onDecided: (row: QueueRow) => void; children: ReactNode }) {
  const { t } = useI18n();
  return (
    <>
      <tr data-testid="review-row" data-task-id={row.id} data-code={row.code} data-status={row.status} className={open ? 'selected' : ''}>
        {children}
        <td className="cell-actions">
          <button type="button" className="btn btn-small" aria-expanded={open} onClick={onToggle} data-testid="review-open">
            {open ? t('review.close') : t('review.open')}
          </button>
        </td>
      </tr>
      {open && (
        <tr className="review-open-row" data-testid="review-item" data-task-id={row.id}>
          <td colSpan={9}>
            <ReviewPanel id={row.id} refreshKey={`${row.status}:${row.updatedAt}`} onDecided={() => onDecided(row)} standalone />
          </td>
        </tr>
      )}
    </>
  );
}

function Filters({ f, update, types }: { f: ReviewFilter; update: (p: Partial<ReviewFilter>, replace?: boolean) => void; types: TaskType[] }) {
  const { t } = useI18n();
  const [tenant, setTenant] = useState(f.tenant);
  useEffect(() => setTenant(f.tenant), [f.tenant]);
  const latest = useRef({ f, update });
  latest.current = { f, update };
  useEffect(() => {
    if (tenant === latest.current.f.tenant) return;
    const id = setTimeout(() => latest.current.update({ tenant }, true), 400);
    return () => clearTimeout(id);
  }, [tenant]);
  return (
    <form
      className="filters"
      role="search"
      onSubmit={(e) => {
        e.preventDefault();
        update({ tenant });
      }}
    >
      <label className="field">
        <span>{t('review.type')}</span>
        <select value={f.type} onChange={(e) => update({ type: e.target.value })} data-testid="review-filter-type">
          <option value="">{t('review.anyType')}</option>
          {types.map((ty) => (
            <option key={ty.name} value={ty.name}>
              {ty.name}
            </option>
          ))}
        </select>
      </label>
      <label className="field">
        <span>{t('review.tenant')}</span>
        <input value={tenant} onChange={(e) => setTenant(e.target.value)} data-testid="review-filter-tenant" />
      </label>
      <label className="field">
        <span>{t('review.age')}</span>
        <select value={f.age} onChange={(e) => update({ age: e.target.value as AgePreset | '' })} data-testid="review-filter-age">
          <option value="">{t('review.age.any')}</option>
          {AGES.map((a) => (
            <option key={a} value={a}>
              {t(`review.age.${a}` as MessageKey)}
            </option>
          ))}
        </select>
      </label>
      <button type="button" className="btn btn-ghost" onClick={() => update({ type: '', tenant: '', age: '' })} data-testid="review-filter-clear">
        {t('common.clear')}
      </button>
    </form>
  );
}

const MAX_BULK = 1000;
const ID_PAGE = 100;
type BulkKind = 'APPROVE' | 'REJECT';

// BulkDecision approves or rejects every task matching the filter. The
// dialog shows how many match (the queue's stats) and asks for that number;
// then it reads their ids and sends them in one request, each decided on
// its own. If the number changed meanwhile, nothing is sent: the new count
// is shown, to be confirmed again.
function BulkDecision({ where, canApprove, canReject, onDone }: { where: Record<string, unknown> | null; canApprove: boolean; canReject: boolean; onDone: () => void }) {
  const { t } = useI18n();
  const client = useClient();
  const [kind, setKind] = useState<BulkKind | null>(null);
  const [count, setCount] = useState<number | null>(null);
  const [typed, setTyped] = useState('');
  const [reason, setReason] = useState('');
  const [notice, setNotice] = useState('');
  const [errors, setErrors] = useState<ApiError[]>([]);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ ok: number; failed: ActionResult[]; errors: ApiError[] } | null>(null);
  const [, approveMany] = useMutation<{ approveReviews: ActionResult[] }>(APPROVE_REVIEWS);
  const [, rejectMany] = useMutation<{ rejectReviews: ActionResult[] }>(REJECT_REVIEWS);

  const recount = async () => {
    setCount(null);
    setTyped('');
    const r = await client.query<{ reviewQueueStats: QueueStats }>(REVIEW_QUEUE_STATS, { where }, { requestPolicy: 'network-only' }).toPromise();
    if (r.error) setErrors(fromCombined(r.error));
    else if (r.data) setCount(r.data.reviewQueueStats.size);
  };
  const open = (k: BulkKind) => {
    setKind(k);
    setReason('');
    setNotice('');
    setErrors([]);
    void recount();
  };
  const idsMatching = async (): Promise<string[] | ApiError[]> => {
    const ids: string[] = [];
    let after: string | null = null;
    for (;;) {
      const r = await client
        .query<{ reviewQueue: { totalCount: number; pageInfo: { hasNextPage: boolean; endCursor: string | null }; edges: { node: { id: string } }[] } }>(
          REVIEW_QUEUE_IDS,
          { where, first: ID_PAGE, after },
          { requestPolicy: 'network-only' },
        )
        .toPromise();
      if (r.error || !r.data) return fromCombined(r.error);
      ids.push(...r.data.reviewQueue.edges.map((e) => e.node.id));
      if (!r.data.reviewQueue.pageInfo.hasNextPage || ids.length > MAX_BULK) return ids;
      after = r.data.reviewQueue.pageInfo.endCursor;
    }
  };
  const go = async () => {
    if (!kind || count === null) return;
    setBusy(true);
    setErrors([]);
    const got = await idsMatching();
    if (got.length > 0 && typeof got[0] !== 'string') {
      setBusy(false);
      setErrors(got as ApiError[]);
      return;
    }
    const ids = got as string[];
    if (ids.length !== count) {
      setBusy(false);
      setNotice(t('review.bulk.changed', { n: ids.length }));
      setCount(ids.length);
      setTyped('');
      return;
    }
    const r =
      kind === 'APPROVE'
        ? await approveMany({ ids, reason: reason.trim() || null })
        : await rejectMany({ ids, reason: reason.trim() });
    setBusy(false);
    const list = (kind === 'APPROVE' ? (r.data as { approveReviews?: ActionResult[] } | undefined)?.approveReviews : (r.data as { rejectReviews?: ActionResult[] } | undefined)?.rejectReviews) ?? [];
    if (r.error && list.length === 0) {
      setErrors(fromCombined(r.error));
      return;
    }
    setKind(null);
    setResult({ ok: list.filter((x) => x.ok).length, failed: list.filter((x) => !x.ok), errors: fromCombined(r.error) });
    onDone();
  };

  const n = count ?? 0;
  const tooMany = n > MAX_BULK;
  const ready = count !== null && n > 0 && !tooMany && typed.trim() === String(n) && (kind !== 'REJECT' || reason.trim() !== '');
  return (
    <div className="bulk-filter-actions" data-testid="review-bulk">
      {canApprove && (
        <button type="button" className="btn btn-small" onClick={() => open('APPROVE')} data-testid="review-bulk-approve">
          {t('review.bulkApprove')}
        </button>
      )}
      {canReject && (
        <button type="button" className="btn btn-danger-outline btn-small" onClick={() => open('REJECT')} data-testid="review-bulk-reject">
          {t('review.bulkReject')}
        </button>
      )}
      {kind && (
        <ConfirmDialog
          title={count === null ? t('review.bulk.counting') : kind === 'APPROVE' ? t('review.bulk.titleApprove', { n }) : t('review.bulk.titleReject', { n })}
          confirmLabel={t('review.bulk.confirm', { n })}
          cancelLabel={t('review.bulk.close')}
          onConfirm={() => void go()}
          onClose={() => setKind(null)}
          busy={!ready || busy}
          danger={kind === 'REJECT'}
          testId="review-bulk-dialog"
        >
          {notice && (
            <p className="notice notice-warn" role="alert" data-testid="review-bulk-changed">
              {notice}
            </p>
          )}
          <ErrorBox errors={errors} />
          {count !== null && n === 0 && <p data-testid="review-bulk-none">{t('review.bulk.none')}</p>}
          {tooMany && <p className="error">{t('review.bulk.tooMany', { max: MAX_BULK })}</p>}
          {count !== null && n > 0 && !tooMany && (
            <>
              <p data-testid="review-bulk-summary" data-matched={n}>
                {t('review.bulk.summary', { n })}
              </p>
              <label className="field">
                <span>{kind === 'REJECT' ? t('review.reasonRequired') : t('review.reasonOptional')}</span>
                <input value={reason} onChange={(e) => setReason(e.target.value)} maxLength={2000} data-testid="review-bulk-reason" />
              </label>
              <label className="field">
                <span>{t('review.bulk.typeToConfirm', { n })}</span>
                <input value={typed} onChange={(e) => setTyped(e.target.value)} inputMode="numeric" data-testid="review-bulk-typed" />
              </label>
            </>
          )}
        </ConfirmDialog>
      )}
      {result && (
        <div className={`notice ${result.failed.length || result.errors.length ? 'notice-warn' : ''}`} role="status" data-testid="review-bulk-result" data-ok={result.ok} data-failed={result.failed.length}>
          {t('review.bulk.done', { ok: result.ok, failed: result.failed.length })}
          {result.failed.length > 0 && (
            <ul>
              {result.failed.map((x) => (
                <li key={x.id}>
                  #{x.id}: {x.error?.code} — {x.error?.message}
                </li>
              ))}
            </ul>
          )}
          <ErrorBox errors={result.errors} />
          <button type="button" className="btn btn-ghost btn-small" onClick={() => setResult(null)}>
            {t('err.dismiss')}
          </button>
        </div>
      )}
    </div>
  );
}
