// The audit trail (admins only, as the auditLogs query): who did what to
// which tasks, filtered and paged, newest first. New records appear on the
// first page by polling every few seconds (there is no audit subscription).
// "Export CSV" runs an export task (source audit, the same filters) and
// offers its file through artifactDownloadUrl.
import { useEffect, useMemo, useRef, useState } from 'react';
import { gql } from '@urql/core';
import { useClient, useQuery } from 'urql';
import { fromCombined, type ApiError } from '../api/errors';
import { ErrorBox } from '../components/ErrorBox';
import { useI18n } from '../i18n';
import { formatDateTime, fromLocalInput, toLocalInput } from '../lib/time';
import { Link } from '../router';

export const AUDIT_ACTIONS = [
  'CREATE',
  'CANCEL',
  'RETRY',
  'CANCEL_MANY',
  'RETRY_MANY',
  'DOWNLOAD',
  'SCHEDULE_CREATE',
  'SCHEDULE_UPDATE',
  'SCHEDULE_PAUSE',
  'SCHEDULE_RESUME',
  'SCHEDULE_DELETE',
  'SCHEDULE_RUN_NOW',
  'FLOW_CONTROL_SET',
  'TYPE_PAUSE',
  'TYPE_RESUME',
] as const;
export const AUDIT_OUTCOMES = ['OK', 'PARTIAL', 'FAILED'] as const;
const POLL_SECONDS = 5;
const PAGE_SIZE = 50;

const AUDIT_LOGS = gql`
  query AuditLogs($first: Int, $after: Cursor, $where: AuditLogWhereInput) {
    auditLogs(first: $first, after: $after, where: $where) {
      totalCount
      pageInfo { hasNextPage endCursor }
      edges { node { id createdAt actor role source tenant action taskIds outcome errorCode remoteAddr details } }
    }
  }
`;
const CREATE_EXPORT = gql`
  mutation AuditExport($input: CreateTaskInput!) { createTask(input: $input) { id code status } }
`;
const EXPORT_STATUS = gql`
  query AuditExportStatus($id: ID!) { task(id: $id) { id code status lastError } }
`;
const DOWNLOAD = gql`
  mutation AuditExportDownload($taskId: ID!) { artifactDownloadUrl(taskId: $taskId, kind: EXPORT) { url expiresAt } }
`;

interface AuditRow {
  id: string;
  createdAt: string;
  actor: string;
  role: string;
  source: string;
  tenant: string;
  action: string;
  taskIds: string[] | null;
  outcome: string;
  errorCode: string;
  remoteAddr: string;
  details: Record<string, unknown> | null;
}

export interface AuditFilter {
  actor: string;
  action: string;
  outcome: string;
  task: string;
  from: string; // ISO or ''
  to: string;
}
const EMPTY: AuditFilter = { actor: '', action: '', outcome: '', task: '', from: '', to: '' };

export function auditWhere(f: AuditFilter): Record<string, unknown> | null {
  const w: Record<string, unknown> = {};
  if (f.actor.trim()) w.actor = f.actor.trim();
  if (f.action) w.action = f.action;
  if (f.outcome) w.outcome = f.outcome;
  if (/^\d+$/.test(f.task.trim())) w.taskID = f.task.trim();
  if (f.from) w.createdAtGTE = f.from;
  if (f.to) w.createdAtLT = f.to;
  return Object.keys(w).length ? w : null;
}

// auditExportFilter is the same filter as the export task's input.
export function auditExportFilter(f: AuditFilter): Record<string, unknown> {
  const x: Record<string, unknown> = {};
  if (f.actor.trim()) x.actor = f.actor.trim();
  if (f.action) x.action = [f.action];
  if (f.outcome) x.outcome = f.outcome;
  if (/^\d+$/.test(f.task.trim())) x.taskId = Number(f.task.trim());
  if (f.from) x.createdAfter = f.from;
  if (f.to) x.createdBefore = f.to;
  return x;
}

export function Audit() {
  const { t, locale } = useI18n();
  const [f, setF] = useState<AuditFilter>(EMPTY);
  // Text fields apply after a pause.
  const [actor, setActor] = useState('');
  const [task, setTask] = useState('');
  useEffect(() => {
    const id = setTimeout(() => setF((x) => (x.actor === actor && x.task === task ? x : { ...x, actor, task })), 400);
    return () => clearTimeout(id);
  }, [actor, task]);
  // Cursors of the pages before this one: [] on the first page.
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors.length ? cursors[cursors.length - 1] : null;
  useEffect(() => setCursors([]), [f]);

  const where = useMemo(() => auditWhere(f), [f]);
  const [res, reexecute] = useQuery<{ auditLogs: { totalCount: number; pageInfo: { hasNextPage: boolean; endCursor: string | null }; edges: { node: AuditRow }[] } }>({
    query: AUDIT_LOGS,
    variables: { first: PAGE_SIZE, after, where },
  });
  // Live: the first page polls (no audit subscription exists).
  const first = cursors.length === 0;
  useEffect(() => {
    if (!first) return;
    const id = setInterval(() => reexecute({ requestPolicy: 'network-only' }), POLL_SECONDS * 1000);
    return () => clearInterval(id);
  }, [first, reexecute]);

  const rows = res.data?.auditLogs.edges.map((e) => e.node) ?? [];
  const conn = res.data?.auditLogs;

  return (
    <div className="page" data-testid="page-audit">
      <div className="page-head">
        <h1>{t('audit.title')}</h1>
        <ExportButton f={f} />
      </div>
      <form className="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <label className="field">
          <span>{t('audit.actor')}</span>
          <input value={actor} onChange={(e) => setActor(e.target.value)} data-testid="audit-actor" />
        </label>
        <label className="field">
          <span>{t('audit.action')}</span>
          <select value={f.action} onChange={(e) => setF({ ...f, action: e.target.value })} data-testid="audit-action">
            <option value="">{t('common.all')}</option>
            {AUDIT_ACTIONS.map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>{t('audit.outcome')}</span>
          <select value={f.outcome} onChange={(e) => setF({ ...f, outcome: e.target.value })} data-testid="audit-outcome">
            <option value="">{t('common.all')}</option>
            {AUDIT_OUTCOMES.map((o) => (
              <option key={o} value={o}>
                {o}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>{t('audit.task')}</span>
          <input value={task} inputMode="numeric" onChange={(e) => setTask(e.target.value)} data-testid="audit-task" />
        </label>
        <label className="field">
          <span>{t('audit.from')}</span>
          <input type="datetime-local" value={toLocalInput(f.from)} onChange={(e) => setF({ ...f, from: fromLocalInput(e.target.value) ?? '' })} data-testid="audit-from" />
        </label>
        <label className="field">
          <span>{t('audit.to')}</span>
          <input type="datetime-local" value={toLocalInput(f.to)} onChange={(e) => setF({ ...f, to: fromLocalInput(e.target.value) ?? '' })} data-testid="audit-to" />
        </label>
        <button
          type="button"
          className="btn btn-ghost"
          onClick={() => {
            setActor('');
            setTask('');
            setF(EMPTY);
          }}
          data-testid="audit-clear"
        >
          {t('common.clear')}
        </button>
      </form>
      {first && <p className="muted small">{t('audit.live', { s: POLL_SECONDS })}</p>}
      {res.error && <ErrorBox error={res.error} />}
      <div className="table-wrap">
        <table className="table" data-testid="audit-table" aria-busy={res.fetching}>
          <thead>
            <tr>
              <th>{t('audit.col.time')}</th>
              <th>{t('audit.col.actor')}</th>
              <th>{t('audit.col.action')}</th>
              <th>{t('audit.col.outcome')}</th>
              <th>{t('audit.col.tasks')}</th>
              <th>{t('audit.col.details')}</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.id} data-testid="audit-row" data-audit-id={r.id} data-action={r.action} data-outcome={r.outcome}>
                <td data-label={t('audit.col.time')}>{formatDateTime(r.createdAt, locale)}</td>
                <td data-label={t('audit.col.actor')}>
                  {r.actor} <span className="muted small">{r.role}{r.tenant ? ` · ${r.tenant}` : ''}</span>
                </td>
                <td data-label={t('audit.col.action')} className="mono">{r.action}</td>
                <td data-label={t('audit.col.outcome')}>
                  {r.outcome}
                  {r.errorCode && <span className="muted small"> {r.errorCode}</span>}
                </td>
                <td data-label={t('audit.col.tasks')}>
                  {(r.taskIds ?? []).slice(0, 20).map((id) => (
                    <Link key={id} to={`/tasks/${id}`} className="mono" data-testid="audit-task-link">
                      #{id}{' '}
                    </Link>
                  ))}
                  {(r.taskIds?.length ?? 0) > 20 && <span className="muted">…</span>}
                </td>
                <td data-label={t('audit.col.details')} className="mono small ellipsis" title={r.details ? JSON.stringify(r.details) : ''}>
                  {r.details ? JSON.stringify(r.details) : ''}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {res.data && rows.length === 0 && <p className="muted" data-testid="audit-empty">{t('audit.empty')}</p>}
      </div>
      <div className="pager">
        {conn && <span className="muted" data-testid="audit-total">{t('list.range.of', { from: cursors.length * PAGE_SIZE + (rows.length ? 1 : 0), to: cursors.length * PAGE_SIZE + rows.length, total: conn.totalCount })}</span>}
        <button type="button" className="btn btn-small" disabled={cursors.length === 0} onClick={() => setCursors((c) => c.slice(0, -1))} data-testid="audit-prev">
          {t('list.prev')}
        </button>
        <button
          type="button"
          className="btn btn-small"
          disabled={!conn?.pageInfo.hasNextPage || !conn.pageInfo.endCursor}
          onClick={() => conn?.pageInfo.endCursor && setCursors((c) => [...c, conn.pageInfo.endCursor as string])}
          data-testid="audit-next"
        >
          {t('list.next')}
        </button>
      </div>
    </div>
  );
}

// ExportButton runs the export and, once its task succeeded, links its file.
function ExportButton({ f }: { f: AuditFilter }) {
  const { t } = useI18n();
  const client = useClient();
  const [state, setState] = useState<{ phase: 'idle' | 'running' | 'ready' | 'failed'; code?: string; id?: string; url?: string; error?: string; errors?: ApiError[] }>({ phase: 'idle' });
  const alive = useRef(true);
  useEffect(() => () => void (alive.current = false), []);

  const run = async () => {
    setState({ phase: 'running' });
    const created = await client
      .mutation<{ createTask: { id: string; code: string } }>(CREATE_EXPORT, {
        input: { type: 'export', title: 'Audit trail export', input: { source: 'audit', format: 'csv', filter: auditExportFilter(f) } },
      })
      .toPromise();
    const tk = created.data?.createTask;
    if (!tk) {
      setState({ phase: 'failed', errors: fromCombined(created.error) });
      return;
    }
    setState({ phase: 'running', code: tk.code, id: tk.id });
    for (;;) {
      await new Promise((r) => setTimeout(r, 1000));
      if (!alive.current) return;
      const st = await client
        .query<{ task: { status: string; lastError: string | null } }>(EXPORT_STATUS, { id: tk.id }, { requestPolicy: 'network-only' })
        .toPromise();
      const s = st.data?.task.status;
      if (s === 'SUCCESS') break;
      if (s === 'FAILED' || s === 'CANCELLED' || st.error) {
        setState({ phase: 'failed', code: tk.code, id: tk.id, error: st.data?.task.lastError ?? s, errors: fromCombined(st.error) });
        return;
      }
    }
    const link = await client.mutation<{ artifactDownloadUrl: { url: string } }>(DOWNLOAD, { taskId: tk.id }).toPromise();
    if (!alive.current) return;
    if (!link.data) {
      setState({ phase: 'failed', code: tk.code, id: tk.id, errors: fromCombined(link.error) });
      return;
    }
    setState({ phase: 'ready', code: tk.code, id: tk.id, url: link.data.artifactDownloadUrl.url });
  };

  return (
    <div className="export-audit" data-testid="audit-export-state" data-phase={state.phase}>
      <button type="button" className="btn" onClick={run} disabled={state.phase === 'running'} data-testid="audit-export">
        {t('audit.export')}
      </button>{' '}
      {state.phase === 'running' && state.code && <span className="muted">{t('audit.exporting', { code: state.code })}</span>}
      {state.phase === 'ready' && state.url && (
        <a href={state.url} className="btn btn-primary btn-small" data-testid="audit-export-link" download>
          {t('audit.exportReady')}
        </a>
      )}
      {state.phase === 'failed' && (
        <span role="alert" data-testid="audit-export-error">
          {state.error && t('audit.exportFailed', { error: state.error })}
          {state.id && (
            <>
              {' '}
              <Link to={`/tasks/${state.id}`}>{state.code}</Link>
            </>
          )}
          <ErrorBox errors={state.errors ?? []} />
        </span>
      )}
    </div>
  );
}
