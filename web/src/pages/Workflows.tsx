// Workflows: the list, newest first, with cursor paging and filters kept
// in the URL (text in the code or title, owner). A row's status and
// progress are derived from its steps by the server; a change of any
// workflow step re-reads the page (throttled), so they stay live.
import { useCallback, useEffect, useMemo, useState, type FormEvent } from 'react';
import { useQuery } from 'urql';
import { gql } from '@urql/core';
import { WORKFLOWS, type PageInfo, type WorkflowRow } from '../api/queries';
import { ErrorBox } from '../components/ErrorBox';
import { ProgressBar } from '../components/ProgressBar';
import { StatusChip } from '../components/StatusChip';
import { useI18n } from '../i18n';
import { useEvents, useOnReconnect, useThrottle } from '../lib/hooks';
import { formatDateTime } from '../lib/time';
import { Link, navigate, useLocation } from '../router';

const PAGE = 20;

// Any change of a task that is a workflow step (it has a step key).
const STEP_CHANGED = gql`
  subscription AnyStepUpdated {
    taskUpdated(where: { stepKeyNotNil: true }) { id status }
  }
`;

export interface WorkflowFilter {
  q: string;
  owner: string;
  after: string;
  before: string;
  page: number;
}

export function parseWorkflowFilter(s: URLSearchParams): WorkflowFilter {
  return { q: s.get('q') ?? '', owner: s.get('owner') ?? '', after: s.get('after') ?? '', before: s.get('before') ?? '', page: Math.max(1, Number(s.get('page')) || 1) };
}

export function workflowSearch(f: WorkflowFilter): string {
  const p = new URLSearchParams();
  if (f.q) p.set('q', f.q);
  if (f.owner) p.set('owner', f.owner);
  if (f.after) p.set('after', f.after);
  if (f.before) p.set('before', f.before);
  if (f.page > 1) p.set('page', String(f.page));
  const s = p.toString();
  return s ? '?' + s : '';
}

// workflowVariables maps the filter to the workflows query's variables.
export function workflowVariables(f: WorkflowFilter) {
  const and: Record<string, unknown>[] = [];
  const q = f.q.trim();
  if (q) and.push({ or: [{ codeContainsFold: q }, { titleContainsFold: q }] });
  if (f.owner.trim()) and.push({ ownerEqualFold: f.owner.trim() });
  const where = and.length ? { and } : null;
  return f.before ? { last: PAGE, before: f.before, where } : { first: PAGE, after: f.after || null, where };
}

export function Workflows() {
  const { t, locale } = useI18n();
  const { search } = useLocation();
  const f = useMemo(() => parseWorkflowFilter(search), [search]);
  const setFilter = (next: WorkflowFilter) => navigate('/workflows' + workflowSearch(next));
  const variables = useMemo(() => workflowVariables(f), [f]);
  const [res, reexecute] = useQuery<{ workflows: { totalCount: number; pageInfo: PageInfo; edges: { node: WorkflowRow }[] } }>({ query: WORKFLOWS, variables });
  const refetch = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const throttled = useThrottle(refetch, 2000);
  useEvents(STEP_CHANGED, {}, 'all', false, throttled);
  useOnReconnect(refetch);

  const [q, setQ] = useState(f.q);
  const [owner, setOwner] = useState(f.owner);
  useEffect(() => setQ(f.q), [f.q]);
  useEffect(() => setOwner(f.owner), [f.owner]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setFilter({ q, owner, after: '', before: '', page: 1 });
  };

  const conn = res.data?.workflows;
  const rows = conn?.edges.map((e) => e.node) ?? [];
  const pageInfo = conn?.pageInfo;
  const hasPrev = f.before ? !!pageInfo?.hasPreviousPage : !!f.after;
  const hasNext = f.before ? true : !!pageInfo?.hasNextPage;

  return (
    <div className="page" data-testid="page-workflows">
      <h1>{t('wf.listTitle')}</h1>
      <form className="filters" onSubmit={submit} role="search">
        <label className="field">
          <span>{t('wf.search')}</span>
          <input value={q} onChange={(e) => setQ(e.target.value)} placeholder={t('wf.searchHint')} data-testid="wf-search" />
        </label>
        <label className="field">
          <span>{t('wf.owner')}</span>
          <input value={owner} onChange={(e) => setOwner(e.target.value)} data-testid="wf-owner" />
        </label>
        <button type="submit" className="btn" data-testid="wf-apply">
          {t('wf.apply')}
        </button>
      </form>
      {res.error && <ErrorBox error={res.error} />}
      <div className="table-wrap">
        <table className="table" data-testid="workflow-table">
          <thead>
            <tr>
              <th>{t('wf.code')}</th>
              <th>{t('wf.titleCol')}</th>
              <th>{t('wf.status')}</th>
              <th>{t('wf.progress')}</th>
              <th>{t('wf.owner')}</th>
              <th>{t('wf.created')}</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((w) => (
              <tr key={w.id} data-testid="workflow-row" data-workflow-id={w.id}>
                <td className="mono">
                  <Link to={`/workflows/${w.id}`}>{w.code}</Link>
                </td>
                <td>{w.title || '—'}</td>
                <td>
                  <StatusChip status={w.status} />
                </td>
                <td>
                  <ProgressBar done={w.stepsDone} total={w.stepCount} status={w.status} />
                </td>
                <td>{w.owner}</td>
                <td>{formatDateTime(w.createdAt, locale)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {conn && rows.length === 0 && (
          <p className="empty" data-testid="workflows-empty">
            {t('wf.none')}
          </p>
        )}
        {!conn && res.fetching && <p className="muted">{t('common.loading')}</p>}
      </div>
      <div className="pager">
        <span className="muted" data-testid="wf-range">
          {conn && rows.length > 0 ? t('list.range.of', { from: (f.page - 1) * PAGE + 1, to: (f.page - 1) * PAGE + rows.length, total: conn.totalCount }) : ''}
        </span>
        <button type="button" className="btn btn-small" disabled={!hasPrev} onClick={() => setFilter({ ...f, after: '', before: '', page: 1 })} data-testid="wf-page-first">
          {t('list.first')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasPrev || !pageInfo?.startCursor}
          onClick={() => setFilter({ ...f, after: '', before: pageInfo?.startCursor ?? '', page: Math.max(1, f.page - 1) })}
          data-testid="wf-page-prev"
        >
          {t('list.prev')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!hasNext || !pageInfo?.endCursor}
          onClick={() => setFilter({ ...f, before: '', after: pageInfo?.endCursor ?? '', page: f.page + 1 })}
          data-testid="wf-page-next"
        >
          {t('list.next')}
        </button>
      </div>
    </div>
  );
}
