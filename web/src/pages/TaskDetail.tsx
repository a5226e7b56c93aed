import { useCallback, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import { useClient, useQuery, useSubscription } from 'urql';
import { fromCombined, type ApiError } from '../api/errors';
import { TASK, TASK_LOG_APPENDED, TASK_LOGS, TASK_UPDATED, TASK_WAITING, type ArtifactKind, type TaskFull, type TaskInstance, type TaskLogLine, type WaitReason } from '../api/queries';
import { ActionButtons } from '../components/ActionButtons';
import { ErrorBox } from '../components/ErrorBox';
import { JsonView } from '../components/JsonView';
import { ProgressBar } from '../components/ProgressBar';
import { ReviewPanel } from '../components/ReviewPanel';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import { artifactKinds, importResult } from '../lib/artifacts';
import { useNow, useOnReconnect } from '../lib/hooks';
import { formatDateTime, formatDuration, formatTime } from '../lib/time';
import { Link } from '../router';
import { RelativeTime } from '../components/RelativeTime';

const LOG_TAIL = 200;

const ARTIFACT_DOWNLOAD_URL = `mutation ArtifactDownloadUrl($taskId: ID!, $kind: ArtifactKind) { artifactDownloadUrl(taskId: $taskId, kind: $kind) { url expiresAt } }`;

export function TaskDetail({ id }: { id: string }) {
  const { t, locale } = useI18n();
  const now = useNow();
  const [res, reexecute] = useQuery<{ task: TaskFull | null }>({ query: TASK, variables: { id } });
  const refetch = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  // With an id, the first message is the current state, so a change made
  // between the query and the subscription is never missed. Each event
  // carries the task with its executions, merged into the cache by id.
  const [sub] = useSubscription<{ taskUpdated: TaskFull }>({ query: TASK_UPDATED, variables: { id } });
  const task = newestTask(res.data?.task ?? null, sub.data?.taskUpdated ?? null, id);
  // A query answer older than what the subscription said left the cache
  // behind: read it again (the answer is then at least as new).
  const stale = task !== null && task !== (res.data?.task ?? null);
  useEffect(() => {
    if (stale) refetch();
  }, [stale, refetch]);
  useOnReconnect(refetch);

  if (!task) {
    if (res.error) {
      const notFound = fromCombined(res.error).some((e) => e.code === 'NOT_FOUND');
      return (
        <div className="page" data-testid="page-task">
          <Link to="/tasks">← {t('detail.back')}</Link>
          {notFound ? <p className="error-box" data-testid="error" data-code="NOT_FOUND">{t('detail.notFound', { id })}</p> : <ErrorBox error={res.error} />}
        </div>
      );
    }
    return (
      <p className="muted" data-testid="task-loading">
        {t('common.loading')}
      </p>
    );
  }

  const ir = importResult(task.result);
  return (
    <div className="page" data-testid="page-task" data-task-id={task.id}>
      <Link to="/tasks" className="back">
        ← {t('detail.back')}
      </Link>
      <header className="task-head">
        <div>
          <h1 className="mono" data-testid="task-code">
            {task.code}
          </h1>
          {task.title && <div className="task-title">{task.title}</div>}
          {res.data?.task?.workflow && (
            <div className="muted small" data-testid="task-workflow">
              {t('detail.stepOf', { key: res.data.task.stepKey ?? '' })}{' '}
              <Link to={`/workflows/${res.data.task.workflow.id}`} className="mono">
                {res.data.task.workflow.code}
              </Link>
              {res.data.task.workflow.title && ` · ${res.data.task.workflow.title}`}
            </div>
          )}
          {task.stalledAt && task.status === 'EXECUTING' && (
            <div className="notice notice-warn" role="status" data-testid="task-stalled">
              {t('detail.stalled', { at: formatDateTime(task.stalledAt, locale) })}
            </div>
          )}
        </div>
        <div className="task-head-right">
          <StatusChip status={task.status} />
          {ir && <StatusChip status={ir.status} testId="result-status" />}
          <ActionButtons task={task} />
        </div>
      </header>
      {task.cancelRequested && task.status === 'EXECUTING' && (
        <div className="notice" role="status" data-testid="cancel-requested">
          {t('action.cancelRequested')}
        </div>
      )}
      {(task.status === 'PENDING' || task.status === 'RETRY_PENDING') && <Waiting id={task.id} version={task.version} />}
      {sub.error && <ErrorBox error={sub.error} />}
      {/* A review waiting for a decision comes first; a decided one, input versions and the replay of a FAILED task after the result. */}
      {task.status === 'REVIEW_PENDING' && <ReviewPanel id={task.id} refreshKey={`${task.status}:${task.instances.length}`} />}

      {(task.progressTotal > 0 || !['FAILED', 'CANCELLED'].includes(task.status)) && (
        <section className="card" aria-labelledby="progress">
          <h2 id="progress">{t('detail.progress')}</h2>
          <ProgressBar done={task.progressDone} total={task.progressTotal} status={task.status} />
        </section>
      )}

      <div className="grid-2">
        <section className="card" aria-labelledby="meta">
          <h2 id="meta">{t('detail.meta')}</h2>
          <dl className="meta">
            <Meta label={t('detail.type')} value={task.type} />
            <Meta label={t('detail.owner')} value={task.owner} />
            <Meta label={t('detail.bizId')} value={task.bizID || '—'} mono />
            <Meta label={t('detail.priority')} value={String(task.priority)} />
            <Meta label={t('detail.retryPolicy')} value={`${task.retryPolicy} · ${t('detail.maxAttempts')} ${task.maxAttempts}`} />
            <Meta label={t('detail.timeout')} value={formatDuration(task.timeoutSeconds * 1000)} />
            <Meta label={t('detail.created')} value={formatDateTime(task.createdAt, locale)} />
            <Meta label={t('detail.runAt')} value={formatDateTime(task.runAt, locale)} />
            <Meta label={t('detail.updated')} value={formatDateTime(task.updatedAt, locale)} />
            <Meta label={t('detail.finished')} value={formatDateTime(task.finishedAt, locale)} />
            {task.idempotencyKey && <Meta label={t('detail.idempotencyKey')} value={task.idempotencyKey} mono />}
            {task.cancelReason && <Meta label={t('detail.cancelReason')} value={task.cancelReason} />}
          </dl>
        </section>
        <section className="card" aria-labelledby="input">
          <h2 id="input">{t('detail.input')}</h2>
          <p className="muted small">{t('detail.inputMasked')}</p>
          <JsonView value={task.input} testId="task-input" />
        </section>
      </div>

      <div className="grid-2">
        <section className="card" aria-labelledby="result" data-testid="task-result">
          <h2 id="result">{t('detail.result')}</h2>
          {ir ? (
            <div className="import-result">
              <StatusChip status={ir.status} testId="import-status" />
              <dl className="counters">
                <div>
                  <dt>{t('detail.import.total')}</dt>
                  <dd data-testid="import-total">{ir.totalCount}</dd>
                </div>
                <div>
                  <dt>{t('detail.import.success')}</dt>
                  <dd data-testid="import-success">{ir.successCount}</dd>
                </div>
                <div>
                  <dt>{t('detail.import.failed')}</dt>
                  <dd data-testid="import-failed">{ir.failedCount}</dd>
                </div>
              </dl>
            </div>
          ) : task.result !== null && task.result !== undefined ? (
            <JsonView value={task.result} />
          ) : (
            <p className="muted" data-testid="no-result">
              {task.status === 'SUCCESS' ? t('detail.doneNoResult') : t('detail.noResult')}
            </p>
          )}
          {task.lastError && (
            <>
              <h3>{t('detail.lastError')}</h3>
              <pre className="error-text" data-testid="task-last-error">
                {task.lastError}
              </pre>
            </>
          )}
        </section>
        <Artifacts task={task} />
      </div>

      {task.status !== 'REVIEW_PENDING' && <ReviewPanel id={task.id} refreshKey={`${task.status}:${task.instances.length}`} />}

      <section className="card" aria-labelledby="instances">
        <h2 id="instances">{t('detail.instances')}</h2>
        {task.instances.length === 0 ? <p className="muted">{t('detail.noInstances')}</p> : <Timeline instances={task.instances} now={now} />}
      </section>

      <Logs taskId={task.id} />
    </div>
  );
}

function Meta({ label, value, mono = false }: { label: string; value: ReactNode; mono?: boolean }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd className={mono ? 'mono' : ''}>{value}</dd>
    </div>
  );
}

// manualRetry tells whether an execution was started by a person's retry:
// a manual retry starts the policy's attempts again at 1, which no
// automatic retry does (an interruption by a shutdown also keeps attempt
// 1, so an execution after an interrupted one is not counted).
export function manualRetry(i: Pick<TaskInstance, 'instanceNo' | 'attempt'>, all: Pick<TaskInstance, 'instanceNo' | 'errorKind'>[]): boolean {
  if (i.instanceNo <= 1 || i.attempt !== 1) return false;
  const before = all.find((x) => x.instanceNo === i.instanceNo - 1);
  return !!before && before.errorKind !== 'INTERRUPTED';
}

function Timeline({ instances, now }: { instances: TaskInstance[]; now: number }) {
  const { t, locale } = useI18n();
  return (
    <ol className="timeline" data-testid="instances">
      {instances.map((i) => {
        const start = i.startedAt ? new Date(i.startedAt).getTime() : null;
        const end = i.finishedAt ? new Date(i.finishedAt).getTime() : null;
        return (
          <li key={i.id} className={`timeline-item tl-${i.status.toLowerCase()}`} data-testid="instance" data-status={i.status}>
            <div className="timeline-head">
              <strong>{t('detail.instance', { n: i.instanceNo })}</strong>
              <span className="muted">{t('detail.attempt', { n: i.attempt })}</span>
              {manualRetry(i, instances) && (
                <span className="badge" data-testid="manual-retry">
                  {t('detail.manualRetry')}
                </span>
              )}
              <StatusChip status={i.status} testId="instance-status" />
            </div>
            <dl className="meta compact">
              <Meta label={t('detail.worker')} value={i.workerID ?? '—'} mono />
              {!start && <Meta label={t('detail.waitUntil')} value={<>{formatDateTime(i.runAt, locale)} (<RelativeTime at={i.runAt} />)</>} />}
              <Meta label={t('detail.started')} value={formatDateTime(i.startedAt, locale)} />
              <Meta label={t('detail.ended')} value={formatDateTime(i.finishedAt, locale)} />
              {start && <Meta label={t('detail.duration')} value={formatDuration((end ?? now) - start) + (end ? '' : ' …')} />}
              {i.errorKind && <Meta label={t('detail.errorKind')} value={i.errorKind} mono />}
            </dl>
            {i.lastError && <pre className="error-text small">{i.lastError}</pre>}
          </li>
        );
      })}
    </ol>
  );
}

function Artifacts({ task }: { task: TaskFull }) {
  const { t } = useI18n();
  const client = useClient();
  // The files follow from the task as loaded (an import keeps its source,
  // a result names its report): the card says there are none only once
  // the task is read, never while it loads (TaskDetail shows the loading
  // state until then).
  const kinds = useMemo(() => artifactKinds(task), [task]);
  const [busy, setBusy] = useState<ArtifactKind | null>(null);
  const [errors, setErrors] = useState<ApiError[]>([]);

  const download = async (kind: ArtifactKind) => {
    setBusy(kind);
    setErrors([]);
    const r = await client.mutation(ARTIFACT_DOWNLOAD_URL, { taskId: task.id, kind }).toPromise();
    setBusy(null);
    const url = (r.data as { artifactDownloadUrl?: { url: string } } | undefined)?.artifactDownloadUrl?.url;
    if (!url) {
      setErrors(fromCombined(r.error));
      return;
    }
    // Same-origin links download in place; a link elsewhere (object
    // storage) opens in a new tab rather than replacing the console.
    const a = document.createElement('a');
    a.href = url;
    a.rel = 'noopener';
    if (new URL(url, window.location.href).origin === window.location.origin) a.download = '';
    else a.target = '_blank';
    document.body.appendChild(a);
    a.click();
    a.remove();
  };

  return (
    <section className="card" aria-labelledby="artifacts" data-testid="artifacts" data-state={kinds.length === 0 ? 'empty' : 'ready'}>
      <h2 id="artifacts">{t('detail.artifacts')}</h2>
      {kinds.length === 0 ? (
        <p className="muted" data-testid="artifacts-empty">
          {t('detail.noArtifacts')}
        </p>
      ) : (
        <div className="actions">
          {kinds.map((k) => (
            <button key={k} type="button" className="btn" disabled={busy !== null} onClick={() => void download(k)} data-testid={`download-${k}`}>
              ⬇ {busy === k ? t('detail.downloading') : t('detail.download', { kind: t(`artifact.${k}` as MessageKey) })}
            </button>
          ))}
        </div>
      )}
      <ErrorBox errors={errors} onDismiss={() => setErrors([])} />
    </section>
  );
}

function sortLogs(lines: TaskLogLine[]): TaskLogLine[] {
  return [...lines].sort((a, b) => Number(a.id) - Number(b.id));
}

export function mergeLogs(current: TaskLogLine[], incoming: TaskLogLine[], keep = 1000): TaskLogLine[] {
  const seen = new Set(current.map((l) => l.id));
  const added = incoming.filter((l) => !seen.has(l.id));
  if (added.length === 0) return current;
  const all = sortLogs([...current, ...added]);
  return all.length > keep ? all.slice(all.length - keep) : all;
}

function Logs({ taskId }: { taskId: string }) {
  const { t, locale } = useI18n();
  const [lines, setLines] = useState<TaskLogLine[]>([]);
  const [appended, setAppended] = useState(0);
  const [follow, setFollow] = useState(true);
  const box = useRef<HTMLDivElement>(null);
  // Subscribe first, then read the tail, and merge by id: no line falls in
  // the gap between the two.
  useSubscription<{ taskLogAppended: TaskLogLine }>({ query: TASK_LOG_APPENDED, variables: { taskId } }, (_p: unknown, data: { taskLogAppended: TaskLogLine }) => {
    if (data?.taskLogAppended) {
      setLines((cur) => mergeLogs(cur, [data.taskLogAppended]));
      setAppended((n) => n + 1);
    }
    return data;
  });
  const [res, reexecute] = useQuery<{ task: { logs: { totalCount: number; edges: { node: TaskLogLine }[] } } | null }>({
    query: TASK_LOGS,
    variables: { id: taskId, last: LOG_TAIL },
    requestPolicy: 'network-only',
  });
  useEffect(() => {
    const nodes = res.data?.task?.logs.edges.map((e) => e.node) ?? [];
    if (nodes.length) setLines((cur) => mergeLogs(cur, nodes));
    setAppended(0);
  }, [res.data]);
  useOnReconnect(useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]));
  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines, follow]);

  const total = Math.max((res.data?.task?.logs.totalCount ?? 0) + appended, lines.length);
  return (
    <section className="card" aria-labelledby="logs">
      <div className="section-head">
        <h2 id="logs">{t('detail.logs')}</h2>
        <span className="muted small">{t('detail.logsCount', { shown: lines.length, total })}</span>
        <label className="inline small">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} data-testid="log-follow" /> {t('detail.follow')}
        </label>
      </div>
      {res.error && <ErrorBox error={res.error} />}
      <div className="log" ref={box} data-testid="log" aria-live="polite">
        {lines.length === 0 ? (
          <p className="muted">{t('detail.noLogs')}</p>
        ) : (
          lines.map((l) => (
            <div key={l.id} className={`log-line log-${l.level.toLowerCase()}`} data-testid="log-line">
              <span className="log-time" title={formatDateTime(l.createdAt, locale)}>
                {formatTime(l.createdAt, locale)}
              </span>
              <span className="log-level">{l.level}</span>
              <span className="log-msg">{l.message}</span>
              {l.fields && Object.keys(l.fields).length > 0 && (
                <span className="log-fields">
                  {Object.entries(l.fields)
                    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
                    .join(' ')}
                </span>
              )}
            </div>
          ))
        )}
      </div>
    </section>
  );
}

// Waiting says why a waiting task is held back (its type paused, at its
// cap, rate limited, or not due yet), read again at every change of the
// task and every few seconds while it waits: what holds it back (the
// other tasks of its type) changes without it.
function Waiting({ id, version }: { id: string; version: number }) {
  const { t, locale } = useI18n();
  const now = useNow(3000);
  const [res, reexecute] = useQuery<{ task: { id: string; waitingReason: WaitReason | null } | null }>({ query: TASK_WAITING, variables: { id }, requestPolicy: 'network-only' });
  useEffect(() => {
    reexecute({ requestPolicy: 'network-only' });
  }, [version, now, reexecute]);
  const w = res.data?.task?.waitingReason;
  if (!w) return null;
  return (
    <div className="notice" role="status" data-testid="waiting-reason" data-kind={w.kind}>
      <strong>{t(`wait.${w.kind}` as MessageKey)}</strong> · {w.message}
      {w.until && ` (${formatDateTime(w.until, locale)})`}
    </div>
  );
}

// newestTask is the task the page shows: the newer, by version, of the
// query's answer and the subscription's last message. The two race: the
// query goes over HTTP and the subscription's first message (the current
// state) over the websocket, and an answer read before the task moved can
// arrive after the state that followed it. A task that finished at once
// (an import of a few rows) would otherwise stay PENDING on the page.
export function newestTask(fromQuery: TaskFull | null, fromSub: TaskFull | null, id: string): TaskFull | null {
  if (!fromSub || fromSub.id !== id) return fromQuery;
  if (!fromQuery || fromSub.version > fromQuery.version) return fromSub;
  return fromQuery;
}
