// One workflow: its derived status and progress, and the picture of its
// steps (laid out by dagre, see lib/dag.ts), each node coloured by its
// step's state and kept live by taskUpdated events of the steps (no
// polling). A node opens its task; a failed step is retried from its node;
// the workflow is cancelled, or re-run from its failed steps, from the
// head.
import { useCallback, useEffect, useMemo, useRef, useState, type KeyboardEvent } from 'react';
import { useMutation, useQuery, type CombinedError } from 'urql';
import { useUncachedClient } from '../api/client';
import { fromCombined } from '../api/errors';
import { CANCEL_WORKFLOW, RETRY_STEP, RETRY_WORKFLOW, STATUSES, STEP_PARENTS, STEPS_UPDATED, WORKFLOW, WORKFLOW_STEPS, type StepNode, type WorkflowRow } from '../api/queries';
import { ActionButtons } from '../components/ActionButtons';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { ErrorBox } from '../components/ErrorBox';
import { ProgressBar } from '../components/ProgressBar';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import { countByStatus, drawnSteps, edgePath, layoutDag, MAX_DRAWN, mergeSteps, NODE_H, NODE_W } from '../lib/dag';
import { useEvents, useOnReconnect, useThrottle } from '../lib/hooks';
import { formatDateTime } from '../lib/time';
import { Link, navigate } from '../router';

// Failed steps listed under the picture (all of them, drawn or not), at most.
const MAX_FAILED_LISTED = 100;

export function WorkflowDetail({ id }: { id: string }) {
  const { t, locale } = useI18n();
  const [wfRes, reWf] = useQuery<{ workflow: WorkflowRow | null }>({ query: WORKFLOW, variables: { id } });
  // The steps are read without the cache, and not through a live query
  // (see Uncached): their events are merged here.
  const client = useUncachedClient();
  const [steps, setSteps] = useState<StepNode[]>([]);
  const [stepsError, setStepsError] = useState<CombinedError | null>(null);
  const refetchSteps = useCallback(() => {
    void client
      .query<{ workflow: { id: string; steps: StepNode[] } | null }>(WORKFLOW_STEPS, { id }, { requestPolicy: 'network-only' })
      .toPromise()
      .then((r) => {
        setStepsError(r.error ?? null);
        if (r.data?.workflow) setSteps(r.data.workflow.steps);
      });
  }, [client, id]);
  useEffect(refetchSteps, [refetchSteps]);
  const refetchWf = useCallback(() => reWf({ requestPolicy: 'network-only' }), [reWf]);
  const refetchAll = useCallback(() => {
    refetchWf();
    refetchSteps();
  }, [refetchWf, refetchSteps]);
  useOnReconnect(refetchAll);

  const idsKey = useMemo(
    () =>
      steps
        .map((s) => s.id)
        .sort((a, b) => Number(a) - Number(b))
        .join(','),
    [steps],
  );
  const ids = useMemo(() => (idsKey ? idsKey.split(',') : []), [idsKey]);

  // Events of the steps, newest by version, kept aside from the query's
  // answer and merged with it: a query answer read before a change may
  // arrive after that change's event. The page redraws at most every
  // 250 ms however fast events come (a 10,000-step fan-out).
  const live = useRef(new Map<string, StepNode>());
  const [tick, setTick] = useState(0);
  const redraw = useThrottle(() => setTick((n) => n + 1), 250);
  const throttledWf = useThrottle(refetchWf, 1000);
  const seenEvent = useRef(false);
  const [subError, setSubError] = useState<CombinedError | null>(null);
  // The steps' ids as a range, not a list: the client keys every event
  // by its variables, and 10,000 ids in them cost more than the events.
  // Steps are created together, so the range holds few other tasks; their
  // events are dropped here.
  const idSet = useMemo(() => new Set(ids), [ids]);
  const where = useMemo(() => stepsWhere(ids), [ids]);
  useEvents<{ taskUpdated: StepNode }>(STEPS_UPDATED, { where }, idsKey, ids.length === 0, (r) => {
    if (r.error) setSubError(r.error);
    const s = r.data?.taskUpdated;
    if (!s || !idSet.has(s.id)) return;
    const cur = live.current.get(s.id);
    if (!cur || s.version > cur.version) live.current.set(s.id, s);
    redraw();
    throttledWf();
    // A change made between the steps' read and the subscription's
    // start has no event: read the steps again once the stream is
    // known to be live.
    if (!seenEvent.current) {
      seenEvent.current = true;
      refetchSteps();
    }
  });
  // The same for a workflow where nothing moves after the subscription
  // started: one more read shortly after it was sent.
  useEffect(() => {
    if (!idsKey) return;
    seenEvent.current = false;
    const h = setTimeout(() => {
      refetchSteps();
      refetchWf();
    }, 1000);
    return () => clearTimeout(h);
  }, [idsKey, refetchSteps, refetchWf]);

  // tick says that live changed (it is a ref, mutated in place).
  const merged = useMemo(() => mergeSteps(steps, live.current), [steps, tick]);
  const byId = useMemo(() => new Map(merged.map((s) => [s.id, s])), [merged]);
  const drawn = useMemo(() => drawnSteps(ids.map((i) => ({ id: i }))), [ids]);
  const drawnIds = useMemo(() => drawn.map((d) => d.id), [drawn]);
  // The edges of the drawn steps, read once (they do not change), and
  // not through a live query either.
  const [edgesOf, setEdgesOf] = useState<{ key: string; edges: [string, string][] } | null>(null);
  const [parentsError, setParentsError] = useState<CombinedError | null>(null);
  const drawnKey = drawnIds.join(',');
  useEffect(() => {
    if (!drawnKey) return;
    let stale = false;
    void client
      .query<{ nodes: ({ id: string; parents?: { id: string }[] } | null)[] }>(STEP_PARENTS, { ids: drawnKey.split(',') }, { requestPolicy: 'network-only' })
      .toPromise()
      .then((r) => {
        if (stale) return;
        setParentsError(r.error ?? null);
        if (!r.data) return;
        const out: [string, string][] = [];
        for (const n of r.data.nodes) if (n?.parents) for (const p of n.parents) out.push([p.id, n.id]);
        setEdgesOf({ key: drawnKey, edges: out });
      });
    return () => {
      stale = true;
    };
  }, [client, drawnKey]);
  const edges = edgesOf?.key === drawnKey ? edgesOf.edges : null;
  const edgesReady = drawnIds.length === 0 || edges !== null;
  const layout = useMemo(() => (edgesReady ? layoutDag(drawnIds, edges ?? []) : null), [drawnIds, edges, edgesReady]);

  const wf = wfRes.data?.workflow ?? null;
  if (!wf) {
    if (wfRes.error) {
      const notFound = fromCombined(wfRes.error).some((e) => e.code === 'NOT_FOUND');
      return (
        <div className="page" data-testid="page-workflow">
          <Link to="/workflows">← {t('wf.back')}</Link>
          {notFound ? (
            <p className="error-box" data-testid="error" data-code="NOT_FOUND">
              {t('wf.notFound', { id })}
            </p>
          ) : (
            <ErrorBox error={wfRes.error} />
          )}
        </div>
      );
    }
    return <p className="muted">{t('common.loading')}</p>;
  }

  const counts = countByStatus(merged);
  const failed = merged.filter((s) => s.status === 'FAILED');
  return (
    <div className="page" data-testid="page-workflow" data-workflow-id={wf.id}>
      <Link to="/workflows" className="back">
        ← {t('wf.back')}
      </Link>
      <header className="task-head">
        <div>
          <h1 className="mono" data-testid="workflow-code">
            {wf.code}
          </h1>
          {wf.title && <div className="task-title">{wf.title}</div>}
          <div className="muted small">
            {t('wf.meta', { owner: wf.owner, created: formatDateTime(wf.createdAt, locale), policy: t(`wf.policy.${wf.onParentFailure}` as MessageKey) })}
          </div>
        </div>
        <div className="task-head-right">
          <StatusChip status={wf.status} testId="workflow-status" />
          <WorkflowActions wf={wf} onDone={refetchAll} />
        </div>
      </header>

      <section className="card" aria-labelledby="wf-progress">
        <h2 id="wf-progress">{t('wf.progress')}</h2>
        <div data-testid="workflow-progress" data-done={wf.stepsDone} data-total={wf.stepCount}>
          <ProgressBar done={wf.stepsDone} total={wf.stepCount} status={wf.status} />
        </div>
        <div className="status-filter" data-testid="workflow-counts">
          {STATUSES.filter((s) => counts[s]).map((s) => (
            <span key={s} className={`chip chip-${s.toLowerCase()}`} data-testid={`count-${s}`} data-count={counts[s]}>
              {t(`status.${s}` as MessageKey)} <span className="chip-count">{counts[s].toLocaleString()}</span>
            </span>
          ))}
        </div>
      </section>

      <section className="card" aria-labelledby="wf-graph">
        <h2 id="wf-graph">{t('wf.graph')}</h2>
        {ids.length > MAX_DRAWN && (
          <p className="notice" role="status" data-testid="graph-capped">
            {t('wf.capped', { drawn: MAX_DRAWN.toLocaleString(), total: ids.length.toLocaleString() })}
          </p>
        )}
        {stepsError && <ErrorBox error={stepsError} />}
        {subError && <ErrorBox error={subError} />}
        {parentsError && <ErrorBox error={parentsError} />}
        {layout ? <Graph layout={layout} steps={byId} /> : <p className="muted">{t('common.loading')}</p>}
      </section>

      {failed.length > 0 && (
        <section className="card" aria-labelledby="wf-failed" data-testid="failed-steps">
          <h2 id="wf-failed">{t('wf.failedSteps', { n: failed.length })}</h2>
          <table className="table">
            <tbody>
              {failed.slice(0, MAX_FAILED_LISTED).map((s) => (
                <tr key={s.id} data-testid="failed-step" data-step-key={s.stepKey ?? ''}>
                  <td className="mono">
                    <Link to={`/tasks/${s.id}`}>{s.stepKey ?? s.code}</Link>
                  </td>
                  <td className="muted small">{s.lastError ?? ''}</td>
                  <td>
                    <ActionButtons task={s} small />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {failed.length > MAX_FAILED_LISTED && <p className="muted small">{t('wf.moreFailed', { n: failed.length - MAX_FAILED_LISTED })}</p>}
        </section>
      )}
    </div>
  );
}

// stepsWhere is the filter of the steps' events: their ids' range (ids
// ascending), among tasks that are steps.
export function stepsWhere(ids: string[]) {
  if (ids.length === 0) return { idIn: [] };
  return { idGTE: ids[0], idLTE: ids[ids.length - 1], stepKeyNotNil: true };
}

function Graph({ layout, steps }: { layout: ReturnType<typeof layoutDag>; steps: Map<string, StepNode> }) {
  const { t } = useI18n();
  const [retryState, retry] = useMutation(RETRY_STEP);
  const [errorShown, setErrorShown] = useState(false);
  const open = (id: string) => navigate(`/tasks/${id}`);
  const onKey = (id: string) => (e: KeyboardEvent) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      open(id);
    }
  };
  const byId = new Map(layout.nodes.map((n) => [n.id, n]));
  return (
    <div className="wf-graph-wrap">
      <svg
        className="wf-graph"
        width={layout.width}
        height={layout.height}
        viewBox={`0 0 ${layout.width} ${layout.height}`}
        role="group"
        aria-label={t('wf.graph')}
        data-testid="workflow-graph"
        data-nodes={layout.nodes.length}
        data-edges={layout.edges.length}
      >
        <defs>
          <marker id="wf-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
            <path d="M 0 0 L 10 5 L 0 10 z" className="wf-arrow" />
          </marker>
        </defs>
        {layout.edges.map((e) => (
          <path key={`${e.from}-${e.to}`} d={edgePath(e.points)} className="wf-edge" markerEnd="url(#wf-arrow)" data-testid="wf-edge" data-from={e.from} data-to={e.to} />
        ))}
        {layout.nodes.map((n) => {
          const s = steps.get(n.id);
          if (!s) return null;
          const canRetry = s.availableActions.includes('RETRY');
          const label = s.stepKey ?? s.code;
          return (
            <g
              key={n.id}
              transform={`translate(${n.x},${n.y})`}
              className={`wf-node wf-${s.status.toLowerCase()}`}
              data-testid="wf-node"
              data-step-key={s.stepKey ?? ''}
              data-task-id={s.id}
              data-status={s.status}
              role="link"
              tabIndex={0}
              aria-label={`${label}: ${t(`status.${s.status}` as MessageKey)}`}
              onClick={() => open(s.id)}
              onKeyDown={onKey(s.id)}
            >
              <title>{`${label} · ${s.type} · ${t(`status.${s.status}` as MessageKey)}${s.lastError ? '\n' + s.lastError : ''}`}</title>
              <rect width={NODE_W} height={NODE_H} rx={8} />
              <text x={10} y={20} className="wf-node-key">
                {label.length > 20 ? label.slice(0, 19) + '…' : label}
              </text>
              <text x={10} y={40} className="wf-node-status">
                {t(`status.${s.status}` as MessageKey)}
              </text>
              {canRetry && (
                <g
                  className="wf-retry"
                  transform={`translate(${NODE_W - 62},${NODE_H - 26})`}
                  role="button"
                  tabIndex={0}
                  aria-label={`${t('action.RETRY')} ${label}`}
                  data-testid="wf-node-retry"
                  onClick={async (e) => {
                    e.stopPropagation();
                    const r = await retry({ id: s.id });
                    setErrorShown(!!r.error);
                  }}
                  onKeyDown={async (e) => {
                    if (e.key !== 'Enter' && e.key !== ' ') return;
                    e.preventDefault();
                    e.stopPropagation();
                    const r = await retry({ id: s.id });
                    setErrorShown(!!r.error);
                  }}
                >
                  <rect width={54} height={20} rx={4} />
                  <text x={27} y={14} textAnchor="middle">
                    {t('action.RETRY')}
                  </text>
                </g>
              )}
            </g>
          );
        })}
      </svg>
      {byId.size === 0 && <p className="muted">{t('wf.noSteps')}</p>}
      {errorShown && retryState.error && <ErrorBox error={retryState.error} onDismiss={() => setErrorShown(false)} />}
    </div>
  );
}

function WorkflowActions({ wf, onDone }: { wf: WorkflowRow; onDone: () => void }) {
  const { t } = useI18n();
  const [confirming, setConfirming] = useState(false);
  const [reason, setReason] = useState('');
  const [cancelState, cancel] = useMutation(CANCEL_WORKFLOW);
  const [retrying, setRetrying] = useState(false);
  const [retryState, retry] = useMutation(RETRY_WORKFLOW);
  const [showError, setShowError] = useState(false);
  const error = cancelState.error ?? retryState.error;
  return (
    <div className="actions" data-testid="workflow-actions">
      {wf.availableActions.includes('RETRY_WORKFLOW') && (
        <button type="button" className="btn btn-primary" data-testid="workflow-retry" disabled={retryState.fetching} onClick={() => setRetrying(true)}>
          {t('wf.retry')}
        </button>
      )}
      {retrying && (
        <ConfirmDialog
          title={t('wf.confirmRetry', { code: wf.code })}
          confirmLabel={t('wf.retry')}
          cancelLabel={t('action.back')}
          busy={retryState.fetching}
          testId="retry-dialog"
          onClose={() => setRetrying(false)}
          onConfirm={async () => {
            const r = await retry({ id: wf.id, reason: reason.trim() || null });
            setRetrying(false);
            setReason('');
            setShowError(!!r.error);
            onDone();
          }}
        >
          <p className="muted small">{t('wf.retryBody')}</p>
          <label className="field">
            <span>{t('action.reason')}</span>
            <input value={reason} maxLength={500} onChange={(e) => setReason(e.target.value)} data-testid="retry-reason" />
          </label>
        </ConfirmDialog>
      )}
      {wf.availableActions.includes('CANCEL') && (
        <button type="button" className="btn btn-danger-outline" data-testid="workflow-cancel" disabled={cancelState.fetching} onClick={() => setConfirming(true)}>
          {t('wf.cancel')}
        </button>
      )}
      {confirming && (
        <ConfirmDialog
          title={t('wf.confirmCancel', { code: wf.code })}
          confirmLabel={t('wf.cancel')}
          cancelLabel={t('action.back')}
          danger
          busy={cancelState.fetching}
          onClose={() => setConfirming(false)}
          onConfirm={async () => {
            const r = await cancel({ id: wf.id, reason: reason.trim() || null });
            setConfirming(false);
            setReason('');
            setShowError(!!r.error);
            onDone();
          }}
        >
          <p className="muted small">{t('wf.cancelBody')}</p>
          <label className="field">
            <span>{t('action.reason')}</span>
            <input value={reason} maxLength={500} onChange={(e) => setReason(e.target.value)} data-testid="cancel-reason" />
          </label>
        </ConfirmDialog>
      )}
      {showError && error && <ErrorBox error={error} onDismiss={() => setShowError(false)} />}
    </div>
  );
}
