// One task's review, where a person decides: why it waits, the evidence
// its handler left (counts, failed rows, the error report to download),
// the input versions with their diffs, earlier reviews, and the decision
// buttons. The review queue opens it for an item; the task page shows it
// for any task that was reviewed, edited, or may be replayed.
import { useCallback, useEffect, useRef, useState } from 'react';
import { useClient, useQuery } from 'urql';
import { fromCombined, hasCode, type ApiError } from '../api/errors';
import { TASK_REVIEW, type Review, type ReviewTask } from '../api/review';
import { useI18n, type MessageKey } from '../i18n';
import { importResult } from '../lib/artifacts';
import { useNow, useOnReconnect } from '../lib/hooks';
import { cell, evidenceParts } from '../lib/review';
import { formatDateTime, relative } from '../lib/time';
import { ErrorBox } from './ErrorBox';
import { InputVersions } from './InputVersions';
import { JsonView } from './JsonView';
import { ReviewDecisions } from './ReviewDecisions';

// refreshKey changes when the task moved (an event the caller saw): the
// review is read again then. standalone: the queue's item (always shown,
// errors included); otherwise (the task page) nothing shows for a task
// never reviewed, never edited and not to be replayed, nor for a server
// without the review API.
export function ReviewPanel({ id, refreshKey, onDecided, standalone = false }: { id: string; refreshKey?: string; onDecided?: () => void; standalone?: boolean }) {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ task: ReviewTask | null }>({ query: TASK_REVIEW, variables: { id }, requestPolicy: 'cache-and-network' });
  const refetch = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const first = useRef(refreshKey);
  useEffect(() => {
    if (refreshKey !== first.current) refetch();
  }, [refreshKey, refetch]);
  useOnReconnect(refetch);

  const task = res.data?.task;
  if (!task) {
    if (res.error && (standalone || !hasCode(res.error, 'GRAPHQL_VALIDATION_FAILED'))) return <ErrorBox error={res.error} />;
    return standalone ? <p className="muted">{t('common.loading')}</p> : null;
  }
  const current = task.reviews[0] ?? task.review;
  const waiting = task.status === 'REVIEW_PENDING';
  const replayable = task.availableActions.includes('REPLAY_WITH_INPUT');
  if (!current && task.inputVersions.length <= 1 && !replayable && !standalone) return null;

  return (
    <div className="review-panel" data-testid="review-panel" data-task-id={task.id} data-status={task.status}>
      {current && (
        <section className="card" aria-labelledby={`review-${task.id}`} data-testid="review-current" data-trigger={current.trigger} data-decision={current.decision ?? ''}>
          <h2 id={`review-${task.id}`}>
            {t('review.section')} <span className="badge">{t(`review.trigger.${current.trigger}` as MessageKey)}</span>
            {current.overdue && <span className="chip chip-failed">{t('review.overdue')}</span>}
          </h2>
          <ReviewSummary review={current} />
          <Evidence task={task} review={current} />
        </section>
      )}
      {standalone && !waiting && (
        <p className="notice" role="status" data-testid="review-not-waiting">
          {t('review.notWaiting')}
        </p>
      )}
      <ReviewDecisions
        task={{ ...task, review: current ?? null }}
        onDecided={() => {
          refetch();
          onDecided?.();
        }}
      />
      <InputVersions versions={task.inputVersions} />
      {task.reviews.length > 1 && (
        <details className="card" data-testid="review-history">
          <summary>
            <strong>{t('review.history')}</strong> ({task.reviews.length - 1})
          </summary>
          <ol className="versions">
            {task.reviews.slice(1).map((r) => (
              <li key={r.id} data-testid="review-earlier" data-decision={r.decision ?? ''}>
                <strong>{t('review.execution', { n: r.instanceNo })}</strong> · {t(`review.trigger.${r.trigger}` as MessageKey)}
                <ReviewSummary review={r} />
              </li>
            ))}
          </ol>
        </details>
      )}
    </div>
  );
}

function ReviewSummary({ review: r }: { review: Review }) {
  const { t, locale } = useI18n();
  const now = useNow();
  return (
    <>
      <pre className="error-text" data-testid="review-reason">
        {r.reason}
      </pre>
      <dl className="meta compact">
        <div>
          <dt>{t('review.since')}</dt>
          <dd title={formatDateTime(r.since, locale)}>{relative(r.since, now, t)}</dd>
        </div>
        <div>
          <dt>{t('review.submittedBy')}</dt>
          <dd data-testid="review-submitter">{r.submittedBy}</dd>
        </div>
        {r.deadline && (
          <div>
            <dt>{t('review.deadline')}</dt>
            <dd>
              {formatDateTime(r.deadline, locale)} ({relative(r.deadline, now, t)}){r.onDeadline && ` · ${t(`review.onDeadline.${r.onDeadline}` as MessageKey)}`}
            </dd>
          </div>
        )}
      </dl>
      {r.fourEyes && !r.decision && (
        <p className="notice small" data-testid="review-four-eyes">
          {t('review.fourEyes', { who: r.submittedBy })}
        </p>
      )}
      {r.decision && (
        <p className="notice" data-testid="review-decision" data-decision={r.decision}>
          {t('review.decided', { decision: t(`review.decision.${r.decision}` as MessageKey), who: r.decidedBy ?? '?', at: formatDateTime(r.decidedAt, locale) })}
          {r.decisionReason && (
            <>
              {' · '}
              {t('review.decisionReason')}: <span data-testid="review-decision-reason">{r.decisionReason}</span>
            </>
          )}
        </p>
      )}
    </>
  );
}

// The counts an import leaves, by their names; any other count shows its key.
const COUNT_LABELS: Record<string, MessageKey> = {
  totalCount: 'detail.import.total',
  successCount: 'detail.import.success',
  failedCount: 'detail.import.failed',
  maxFailedRows: 'review.threshold',
};

function Evidence({ task, review }: { task: ReviewTask; review: Review }) {
  const { t } = useI18n();
  const parts = evidenceParts(review.evidence);
  const report = (review.files ?? []).some((f) => f.kind === 'ERROR_REPORT') || parts.hasReport || !!importResult(task.result)?.reportFile;
  const empty = !parts.counts.length && !parts.rows.length && !parts.rest && parts.raw === null;
  if (empty && !report) return null;
  return (
    <div className="evidence" data-testid="review-evidence">
      <h3>{t('review.evidence')}</h3>
      {parts.counts.length > 0 && (
        <dl className="counters">
          {parts.counts.map(([k, v]) => (
            <div key={k}>
              <dt>{COUNT_LABELS[k] ? t(COUNT_LABELS[k]) : k}</dt>
              <dd data-testid={`evidence-${k}`}>{v}</dd>
            </div>
          ))}
        </dl>
      )}
      {parts.rows.length > 0 && (
        <>
          <h4>{t('review.failedRows')}</h4>
          <div className="table-wrap">
            <table className="table" data-testid="evidence-rows" data-key={parts.rowsKey}>
              <thead>
                <tr>
                  {parts.columns.map((c) => (
                    <th key={c}>{c}</th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {parts.rows.map((r, i) => (
                  <tr key={i} data-testid="evidence-row">
                    {parts.columns.map((c) => (
                      <td key={c} className="small">
                        {cell(r[c])}
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {parts.moreRows > 0 && <p className="muted small">{t('review.moreRows', { n: parts.moreRows })}</p>}
        </>
      )}
      {(parts.rest || parts.raw !== null) && <JsonView value={parts.rest ?? parts.raw} testId="evidence-json" />}
      {report && <ReportDownload taskId={task.id} />}
    </div>
  );
}

// ReportDownload fetches a signed link to the task's error report and
// follows it (the task page's file buttons do the same).
function ReportDownload({ taskId }: { taskId: string }) {
  const { t } = useI18n();
  const client = useClient();
  const [busy, setBusy] = useState(false);
  const [errors, setErrors] = useState<ApiError[]>([]);
  const download = async () => {
    setBusy(true);
    setErrors([]);
    const doc = `mutation ReviewReportUrl($taskId: ID!, $kind: ArtifactKind) { artifactDownloadUrl(taskId: $taskId, kind: $kind) { url expiresAt } }`;
    const r = await client.mutation(doc, { taskId, kind: 'ERROR_REPORT' }).toPromise();
    setBusy(false);
    const url = (r.data as { artifactDownloadUrl?: { url: string } } | undefined)?.artifactDownloadUrl?.url;
    if (!url) {
      setErrors(fromCombined(r.error));
      return;
    }
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
    <div className="actions">
      <button type="button" className="btn" disabled={busy} onClick={() => void download()} data-testid="review-download-report">
        ⬇ {busy ? t('detail.downloading') : t('detail.download', { kind: t('artifact.ERROR_REPORT') })}
      </button>
      <ErrorBox errors={errors} onDismiss={() => setErrors([])} />
    </div>
  );
}
