import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import { fromCombined, type ApiError } from '../api/errors';
import {
  CANCEL_TASKS,
  RETRY_TASKS,
  STATS,
  STATUSES,
  TASK_ROW_UPDATED,
  TASK_TYPES,
  TASKS,
  type TaskCount,
  type ActionResult,
  type PageInfo,
  type TaskRow,
  type TaskStats,
  type TaskStatus,
  type TaskType,
} from '../api/queries';
import { ActionButtons } from '../components/ActionButtons';
import { BulkFilterAction } from '../components/BulkFilterAction';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { ErrorBox } from '../components/ErrorBox';
import { PayloadFilter } from '../components/PayloadFilter';
import { ProgressBar } from '../components/ProgressBar';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import {
  autoRefreshes,
  filterToSearch,
  liveWhere,
  PAGE_SIZES,
  parseFilter,
  RANGES,
  SORT_FIELDS,
  toVariables,
  withRange,
  type Direction,
  type ListFilter,
  type SortField,
} from '../lib/filters';
import { useOnReconnect, useThrottle } from '../lib/hooks';
import { decodePayload, encodePayload } from '../lib/payload';
import { fromLocalInput, toLocalInput } from '../lib/time';
import { Link, navigate, useLocation } from '../router';
import { RelativeTime } from '../components/RelativeTime';
import { CountText } from '../components/CountText';

interface TasksData {
  tasks: { pageInfo: PageInfo; edges: { cursor: string; node: TaskRow }[] };
  taskCount: TaskCount;
}

export function TaskList() {
  const { t } = useI18n();
  const { search } = useLocation();
  const f = useMemo(() => parseFilter(search), [search]);

  const setFilter = useCallback((next: ListFilter, replace = false) => navigate('/tasks' + filterToSearch(next), { replace }), []);
  // Any change of the filter starts again at the first page.
  const update = (patch: Partial<ListFilter>, replace = false) => setFilter({ ...f, after: '', before: '', page: 1, ...patch }, replace);

  const variables = useMemo(() => toVariables(f), [f]);
  const [res, reexecute] = useQuery<TasksData>({ query: TASKS, variables });
  const [stats, reexecuteStats] = useQuery<{ taskStats: TaskStats }>({ query: STATS });
  const [types] = useQuery<{ taskTypes: TaskType[] }>({ query: TASK_TYPES });

  const rows = useMemo(() => res.data?.tasks.edges.map((e) => e.node) ?? [], [res.data]);
  const ids = useMemo(() => rows.map((r) => r.id), [rows]);
  const [newArrivals, setNewArrivals] = useState(false);

  const refetch = useCallback(() => {
    setNewArrivals(false);
    reexecute({ requestPolicy: 'network-only' });
    reexecuteStats({ requestPolicy: 'network-only' });
  }, [reexecute, reexecuteStats]);
  const throttledRefetch = useThrottle(refetch, 1500);
  const throttledStats = useThrottle(() => reexecuteStats({ requestPolicy: 'network-only' }), 2000);
  useOnReconnect(refetch);

  // Changes of the rows on screen update them in place (Graphcache merges
  // the event into the Task); a new matching task refreshes the first page,
  // or offers a refresh on later pages.
  const idsRef = useRef(ids);
  idsRef.current = ids;
  const liveVars = useMemo(() => ({ where: liveWhere(f, ids) }), [f, ids]);
  const autoRef = useRef(autoRefreshes(f));
  autoRef.current = autoRefreshes(f);
  useSubscription({ query: TASK_ROW_UPDATED, variables: liveVars }, (_prev: unknown, data: { taskUpdated: TaskRow }) => {
    throttledStats();
    const id = data?.taskUpdated?.id;
    if (id && !idsRef.current.includes(id)) {
      if (autoRef.current) throttledRefetch();
      else setNewArrivals(true);
    }
    return data;
  });

  // Selection (of this page only).
  const [selected, setSelected] = useState<Set<string>>(new Set());
  useEffect(() => setSelected(new Set()), [variables]);
  const selectedRows = rows.filter((r) => selected.has(r.id));
  const cancellable = selectedRows.filter((r) => r.availableActions.includes('CANCEL'));
  const retryable = selectedRows.filter((r) => r.availableActions.includes('RETRY'));
  const allSelected = rows.length > 0 && rows.every((r) => selected.has(r.id));
  const toggle = (id: string) =>
    setSelected((s) => {
      const n = new Set(s);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });

  const [bulk, setBulk] = useState<null | 'CANCEL' | 'RETRY'>(null);
  const [cancelState, cancelMany] = useMutation<{ cancelTasks: ActionResult[] }>(CANCEL_TASKS);
  const [retryState, retryMany] = useMutation<{ retryTasks: ActionResult[] }>(RETRY_TASKS);
  const [bulkResult, setBulkResult] = useState<{ ok: number; failed: ActionResult[]; errors: ApiError[] } | null>(null);
  const runBulk = async () => {
    const kind = bulk;
    setBulk(null);
    if (kind === 'CANCEL') {
      const r = await cancelMany({ ids: cancellable.map((x) => x.id), reason: null });
      const list = r.data?.cancelTasks ?? [];
      setBulkResult({ ok: list.filter((x) => x.ok).length, failed: list.filter((x) => !x.ok), errors: fromCombined(r.error) });
    } else if (kind === 'RETRY') {
      const r = await retryMany({ ids: retryable.map((x) => x.id) });
      const list = r.data?.retryTasks ?? [];
      setBulkResult({ ok: list.filter((x) => x.ok).length, failed: list.filter((x) => !x.ok), errors: fromCombined(r.error) });
    }
    setSelected(new Set());
  };

  const conn = res.data?.tasks;
  const pageInfo = conn?.pageInfo;
  const hasPrev = f.before ? !!pageInfo?.hasPreviousPage : !!f.after;
  const hasNext = f.before ? true : !!pageInfo?.hasNextPage;
  const statusCount = (s: TaskStatus) => stats.data?.taskStats.byStatus.find((b) => b.status === s);
  const toggleStatus = (s: TaskStatus) =>
    update({ statuses: f.statuses.includes(s) ? f.statuses.filter((x) => x !== s) : [...f.statuses, s] });

  return (
    <div className="page" data-testid="page-tasks">
      <h1>{t('list.title')}</h1>

      <div className="status-filter" role="group" aria-label={t('list.statusFilter')}>
        {STATUSES.map((s) => (
          <button
            key={s}
            type="button"
            className={`chip-toggle chip-${s.toLowerCase()} ${f.statuses.includes(s) ? 'on' : ''}`}
            aria-pressed={f.statuses.includes(s)}
            onClick={() => toggleStatus(s)}
            data-testid={`filter-status-${s}`}
          >
            {t(`status.${s}` as MessageKey)}
            {stats.data && statusCount(s) && (
              <span className="chip-count">
                <CountText c={statusCount(s)!} exact={stats.data.taskStats.exact} sampled={stats.data.taskStats.sampled} />
              </span>
            )}
          </button>
        ))}
      </div>

      <Filters f={f} update={update} types={types.data?.taskTypes ?? []} />
      <PayloadFilter
        value={decodePayload(f.payload)}
        onChange={(conds) => update({ payload: encodePayload(conds) })}
        inputSchema={types.data?.taskTypes.find((ty) => ty.name === f.type)?.inputSchema}
      />

      {newArrivals && (
        <div className="notice" role="status">
          {t('list.newTasks')}{' '}
          <button type="button" className="btn btn-small" onClick={refetch} data-testid="refresh-list">
            {t('common.refresh')}
          </button>
        </div>
      )}

      <BulkFilterAction where={variables.where} />
      {selected.size > 0 && (
        <div className="bulk-bar" data-testid="bulk-bar">
          <span>{t('list.selected', { n: selected.size })}</span>
          {cancellable.length > 0 && (
            <button type="button" className="btn btn-danger-outline btn-small" onClick={() => setBulk('CANCEL')} data-testid="bulk-cancel" disabled={cancelState.fetching}>
              {t('list.bulkCancel', { n: cancellable.length })}
            </button>
          )}
          {retryable.length > 0 && (
            <button type="button" className="btn btn-primary btn-small" onClick={() => setBulk('RETRY')} data-testid="bulk-retry" disabled={retryState.fetching}>
              {t('list.bulkRetry', { n: retryable.length })}
            </button>
          )}
          <button type="button" className="btn btn-ghost btn-small" onClick={() => setSelected(new Set())}>
            {t('list.clearSelection')}
          </button>
        </div>
      )}
      {bulk && (
        <ConfirmDialog
          title={bulk === 'CANCEL' ? t('action.confirmCancelMany', { n: cancellable.length }) : t('action.confirmRetryMany', { n: retryable.length })}
          confirmLabel={t('action.confirm')}
          cancelLabel={t('action.back')}
          danger={bulk === 'CANCEL'}
          onConfirm={runBulk}
          onClose={() => setBulk(null)}
        />
      )}
      {bulkResult && (
        <div className={`notice ${bulkResult.failed.length || bulkResult.errors.length ? 'notice-warn' : ''}`} role="status" data-testid="bulk-result">
          {t('action.done', { ok: bulkResult.ok, failed: bulkResult.failed.length })}
          {bulkResult.failed.length > 0 && (
            <ul>
              {bulkResult.failed.map((x) => (
                <li key={x.id}>
                  #{x.id}: {x.error?.code} — {x.error?.message}
                </li>
              ))}
            </ul>
          )}
          <ErrorBox errors={bulkResult.errors} />
          <button type="button" className="btn btn-ghost btn-small" onClick={() => setBulkResult(null)}>
            {t('err.dismiss')}
          </button>
        </div>
      )}

      {res.error && <ErrorBox error={res.error} />}

      <div className="table-wrap">
        <table className="table task-table" data-testid="task-table" aria-busy={res.fetching}>
          <thead>
            <tr>
              <th className="check">
                <input
                  type="checkbox"
                  aria-label={t('list.selectAll')}
                  checked={allSelected}
                  onChange={() => setSelected(allSelected ? new Set() : new Set(ids))}
                  data-testid="select-all"
                />
              </th>
              <th>{t('list.col.code')}</th>
              <th>{t('list.col.title')}</th>
              <th>{t('list.col.type')}</th>
              <th>{t('list.col.status')}</th>
              <th>{t('list.col.progress')}</th>
              <th>{t('list.col.owner')}</th>
              <th>{t('list.col.created')}</th>
              <th>{t('list.col.finished')}</th>
              <th>{t('list.col.actions')}</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.id} data-testid="task-row" data-task-id={r.id} data-code={r.code} className={selected.has(r.id) ? 'selected' : ''}>
                <td className="check">
                  <input type="checkbox" checked={selected.has(r.id)} onChange={() => toggle(r.id)} aria-label={t('list.select', { code: r.code })} data-testid="select-row" />
                </td>
                <td data-label={t('list.col.code')} className="cell-code">
                  <Link to={`/tasks/${r.id}`} className="mono" data-testid="task-link">
                    {r.code}
                  </Link>
                </td>
                <td data-label={t('list.col.title')} className="cell-title ellipsis" title={r.title}>
                  {r.title || <span className="muted">—</span>}
                  {r.bizID && <div className="muted small mono">{r.bizID}</div>}
                </td>
                <td data-label={t('list.col.type')} className="cell-type">{r.type}</td>
                <td data-label={t('list.col.status')} className="cell-status">
                  <StatusChip status={r.status} />
                  {r.cancelRequested && r.status === 'EXECUTING' && <span className="muted small"> ⏹</span>}
                </td>
                <td data-label={t('list.col.progress')} className="cell-progress">
                  {(r.progressTotal > 0 || r.status === 'EXECUTING') && <ProgressBar done={r.progressDone} total={r.progressTotal} status={r.status} compact />}
                </td>
                <td data-label={t('list.col.owner')} className="cell-owner">{r.owner}</td>
                <td data-label={t('list.col.created')} className="cell-created">
                  <RelativeTime at={r.createdAt} testId="task-created" />
                </td>
                <td data-label={t('list.col.finished')} className="cell-finished">
                  <RelativeTime at={r.finishedAt} />
                </td>
                <td data-label={t('list.col.actions')} className="cell-actions">
                  <ActionButtons task={r} small />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {conn && rows.length === 0 && <p className="empty" data-testid="list-empty">{t('list.empty')}</p>}
        {!conn && res.fetching && <p className="muted">{t('common.loading')}</p>}
      </div>

      <div className="pager">
        <span className="muted" data-testid="list-range">
          {conn && rows.length > 0 && res.data
            ? rangeText(t, (f.page - 1) * f.size + 1, (f.page - 1) * f.size + rows.length, res.data.taskCount)
            : ''}
        </span>
        <label className="inline">
          {t('list.pageSize')}{' '}
          <select value={f.size} onChange={(e) => update({ size: Number(e.target.value) })} data-testid="page-size">
            {PAGE_SIZES.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </label>
        <button type="button" className="btn btn-small" disabled={!hasPrev} onClick={() => update({})} data-testid="page-first">
          {t('list.first')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasPrev || !pageInfo?.startCursor}
          onClick={() => setFilter({ ...f, after: '', before: pageInfo?.startCursor ?? '', page: Math.max(1, f.page - 1) })}
          data-testid="page-prev"
        >
          {t('list.prev')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasNext || !pageInfo?.endCursor}
          onClick={() => setFilter({ ...f, before: '', after: pageInfo?.endCursor ?? '', page: f.page + 1 })}
          data-testid="page-next"
        >
          {t('list.next')}
        </button>
      </div>
    </div>
  );
}

function Filters({ f, update, types }: { f: ListFilter; update: (p: Partial<ListFilter>, replace?: boolean) => void; types: TaskType[] }) {
  const { t } = useI18n();
  const [q, setQ] = useState(f.q);
  const [owner, setOwner] = useState(f.owner);
  useEffect(() => setQ(f.q), [f.q]);
  useEffect(() => setOwner(f.owner), [f.owner]);
  const latest = useRef({ f, update });
  latest.current = { f, update };
  // Typing searches after a pause; Enter searches at once.
  useEffect(() => {
    const cur = latest.current.f;
    if (q === cur.q && owner === cur.owner) return;
    const id = setTimeout(() => latest.current.update({ q, owner }, true), 400);
    return () => clearTimeout(id);
  }, [q, owner]);

  return (
    <form
      className="filters"
      role="search"
      onSubmit={(e) => {
        e.preventDefault();
        update({ q, owner });
      }}
    >
      <label className="field grow">
        <span>{t('list.search')}</span>
        <input type="search" value={q} onChange={(e) => setQ(e.target.value)} placeholder={t('list.search')} data-testid="filter-search" />
      </label>
      <label className="field">
        <span>{t('list.type')}</span>
        <select value={f.type} onChange={(e) => update({ type: e.target.value })} data-testid="filter-type">
          <option value="">{t('common.all')}</option>
          {types.map((ty) => (
            <option key={ty.name} value={ty.name}>
              {ty.name}
            </option>
          ))}
        </select>
      </label>
      <label className="field">
        <span>{t('list.owner')}</span>
        <input value={owner} onChange={(e) => setOwner(e.target.value)} data-testid="filter-owner" />
      </label>
      <label className="field">
        <span>{t('list.range')}</span>
        <select value={f.range} onChange={(e) => update(withRange(f, e.target.value as ListFilter['range'], Date.now()))} data-testid="filter-range">
          <option value="">{t('common.all')}</option>
          {RANGES.map((r) => (
            <option key={r} value={r}>
              {t(`list.range.${r}` as MessageKey)}
            </option>
          ))}
          <option value="custom">{t('list.range.custom')}</option>
        </select>
      </label>
      {f.range === 'custom' && (
        <>
          <label className="field">
            <span>{t('list.from')}</span>
            <input type="datetime-local" value={toLocalInput(f.from)} onChange={(e) => update({ from: fromLocalInput(e.target.value) ?? '' })} data-testid="filter-from" />
          </label>
          <label className="field">
            <span>{t('list.to')}</span>
            <input type="datetime-local" value={toLocalInput(f.to)} onChange={(e) => update({ to: fromLocalInput(e.target.value) ?? '' })} data-testid="filter-to" />
          </label>
        </>
      )}
      <label className="field">
        <span>{t('list.sort')}</span>
        <select value={f.sort} onChange={(e) => update({ sort: e.target.value as SortField })} data-testid="sort-field">
          {SORT_FIELDS.map((s) => (
            <option key={s} value={s}>
              {t(`list.sort.${s}` as MessageKey)}
            </option>
          ))}
        </select>
      </label>
      <label className="field">
        <span className="sr-only">{t('list.sort')}</span>
        <select value={f.dir} onChange={(e) => update({ dir: e.target.value as Direction })} data-testid="sort-dir">
          <option value="DESC">{t('list.dir.DESC')}</option>
          <option value="ASC">{t('list.dir.ASC')}</option>
        </select>
      </label>
      <button type="button" className="btn btn-ghost" onClick={() => update({ statuses: [], type: '', owner: '', q: '', range: '', from: '', to: '', payload: '' })} data-testid="filter-clear">
        {t('common.clear')}
      </button>
    </form>
  );
}

/**
 * rangeText is the pager's "21–40 of 1,234", or "of ≈1,234" with the
 * estimate's interval when the count was estimated (a long history whose
 * exact count would take longer than the list should).
 */
export function rangeText(t: ReturnType<typeof useI18n>['t'], from: number, to: number, c: TaskCount): string {
  const n = (v: number) => v.toLocaleString('en-US');
  if (c.exact) return t('list.range.of', { from: n(from), to: n(to), total: n(c.count) });
  return t('list.range.estimate', {
    from: n(from),
    to: n(to),
    total: n(c.count),
    low: n(c.low),
    high: n(c.high),
    pct: Math.max(1, Math.round(c.sampled * 100)),
  });
}
