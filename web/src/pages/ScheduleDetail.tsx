// One schedule: its settings, next fire times, the tasks it created (live:
// a task it fires appears without a reload) and its log of firings, skips
// and misfires. A schedule of a workflow shows the definition's steps and
// the workflows it created (live, as the Workflows page); Run now creates
// one through runScheduleWorkflowNow.
import { useCallback, useEffect, useState } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import { gql } from '@urql/core';
import { fromCombined } from '../api/errors';
import {
  DELETE_SCHEDULE,
  PAUSE_SCHEDULE,
  RESUME_SCHEDULE,
  RUN_SCHEDULE_NOW,
  RUN_SCHEDULE_WORKFLOW_NOW,
  SCHEDULE,
  SCHEDULE_TASK_UPDATED,
  type ScheduleEvent,
  type ScheduleRow,
  type TaskRow,
  type WorkflowRow,
} from '../api/queries';
import { ErrorBox } from '../components/ErrorBox';
import { JsonView } from '../components/JsonView';
import { ProgressBar } from '../components/ProgressBar';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import { useEvents, useOnReconnect, useThrottle } from '../lib/hooks';
import { formatDateTime } from '../lib/time';
import { Link, navigate } from '../router';
import { describe, scheduleWhat } from './Schedules';

type ScheduleTask = TaskRow & { scheduleSlot: string | null };
type ScheduleWorkflowRow = WorkflowRow & { scheduleSlot: string | null };

interface ScheduleFull extends ScheduleRow {
  taskInput: unknown;
  events: { totalCount: number; edges: { node: ScheduleEvent }[] };
  tasks: { totalCount: number; edges: { node: ScheduleTask }[] };
  workflows: { totalCount: number; edges: { node: ScheduleWorkflowRow }[] };
}

// Any change of a workflow step: the workflows' status and progress are
// read again (throttled), as the Workflows page does.
const STEP_CHANGED = gql`
  subscription ScheduleStepUpdated {
    taskUpdated(where: { stepKeyNotNil: true }) { id status }
  }
`;

export function ScheduleDetail({ id }: { id: string }) {
  const { t, locale } = useI18n();
  const [res, reexecute] = useQuery<{ schedule: ScheduleFull | null }>({ query: SCHEDULE, variables: { id } });
  const refetch = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  useOnReconnect(refetch);
  const [sub] = useSubscription<{ taskUpdated: ScheduleTask }>({ query: SCHEDULE_TASK_UPDATED, variables: { where: { scheduleID: id } } });
  const s = res.data?.schedule ?? null;
  // A task this schedule just fired: read the list and the log again.
  const known = new Set(s?.tasks.edges.map((e) => e.node.id) ?? []);
  const fresh = sub.data?.taskUpdated;
  const isNew = !!fresh && !known.has(fresh.id);
  useEffect(() => {
    if (isNew) refetch();
  }, [isNew, fresh?.id, refetch]);

  const [act, setAct] = useState<{ error?: ReturnType<typeof fromCombined> }>({});
  const [, pause] = useMutation(PAUSE_SCHEDULE);
  const [, resume] = useMutation(RESUME_SCHEDULE);
  const [, runNow] = useMutation(RUN_SCHEDULE_NOW);
  const [, runWorkflowNow] = useMutation<{ runScheduleWorkflowNow: ScheduleWorkflowRow }>(RUN_SCHEDULE_WORKFLOW_NOW);
  const [created, setCreated] = useState<{ id: string; code: string } | null>(null);
  const isWorkflow = !!s?.workflow;
  const throttled = useThrottle(refetch, 2000);
  useEvents(STEP_CHANGED, {}, 'schedule-steps', !isWorkflow, throttled);
  const [, del] = useMutation(DELETE_SCHEDULE);
  const run = async (p: Promise<{ error?: Parameters<typeof fromCombined>[0] }>, after?: () => void) => {
    const r = await p;
    setAct({ error: r.error ? fromCombined(r.error) : undefined });
    if (!r.error) {
      refetch();
      after?.();
    }
  };

  if (!s) {
    return (
      <div className="page" data-testid="page-schedule">
        <Link to="/schedules">← {t('sched.back')}</Link>
        {res.error && <ErrorBox error={res.error} />}
      </div>
    );
  }
  return (
    <div className="page" data-testid="page-schedule">
      <Link to="/schedules">← {t('sched.back')}</Link>
      <div className="page-head">
        <h1 data-testid="schedule-name">{s.name}</h1>
        <span className={`chip ${s.paused ? 'chip-muted' : ''}`} data-testid="schedule-state">
          {s.paused ? t('sched.paused') : s.nextFireAt ? t('sched.active') : t('sched.ended')}
        </span>
      </div>
      <div className="actions">
        {s.paused ? (
          <button type="button" className="btn" onClick={() => run(resume({ id }))} data-testid="schedule-resume">
            {t('sched.resume')}
          </button>
        ) : (
          <button type="button" className="btn" onClick={() => run(pause({ id }))} data-testid="schedule-pause">
            {t('sched.pause')}
          </button>
        )}
        <button
          type="button"
          className="btn"
          onClick={() =>
            isWorkflow
              ? run(
                  runWorkflowNow({ id }).then((r) => {
                    const w = r.data?.runScheduleWorkflowNow;
                    if (w) setCreated({ id: w.id, code: w.code });
                    return r;
                  }),
                )
              : run(runNow({ id }))
          }
          data-testid="schedule-run-now"
        >
          {t('sched.runNow')}
        </button>
        <button
          type="button"
          className="btn btn-danger"
          onClick={() => {
            if (window.confirm(t('sched.confirmDelete', { name: s.name }))) void run(del({ id }), () => navigate('/schedules'));
          }}
          data-testid="schedule-delete"
        >
          {t('sched.delete')}
        </button>
      </div>
      {act.error && <ErrorBox errors={act.error} />}
      {created && (
        <p className="notice" data-testid="schedule-run-created">
          <Link to={`/workflows/${created.id}`}>{t('sched.runCreated', { code: created.code })}</Link>
        </p>
      )}
      <section className="card meta-grid">
        <div>
          <span className="muted">{t('sched.when')}</span> <code>{describe(s, t)}</code> · {s.effectiveTimezone}
        </div>
        {s.workflow ? (
          <div data-testid="schedule-workflow">
            <span className="muted">{t('sched.workflow')}</span> {scheduleWhat(s, t)}
            {s.workflow.onParentFailure && ` · ${t('sched.wfPolicy')}: ${t(`wf.policy.${s.workflow.onParentFailure}` as MessageKey)}`}
          </div>
        ) : (
          <div>
            <span className="muted">{t('sched.task')}</span> {s.taskType} {s.taskTitle && `· ${s.taskTitle}`}
          </div>
        )}
        <div>
          <span className="muted">{t('sched.misfire')}</span> {t(`sched.misfire.${s.misfirePolicy}` as MessageKey)}
        </div>
        <div>
          <span className="muted">{t('sched.overlap')}</span> {t(`sched.overlap.${s.overlapPolicy}` as MessageKey)}
          {s.queuedCount > 0 && ` · ${t('sched.queued', { n: s.queuedCount })}`}
        </div>
        <div>
          <span className="muted">{t('sched.next')}</span>{' '}
          <span data-testid="schedule-upcoming">{s.upcoming.map((at) => formatDateTime(at, locale)).join(' · ') || '—'}</span>
        </div>
        {!s.workflow && <JsonView value={s.taskInput} />}
      </section>
      {s.workflow && (
        <section className="card">
          <h2>{t('wf.graph')}</h2>
          <table className="table" data-testid="schedule-wf-steps">
            <thead>
              <tr>
                <th>{t('sched.wfStepKey')}</th>
                <th>{t('sched.wfStepType')}</th>
                <th>{t('sched.wfStepDependsOn')}</th>
                <th>{t('sched.wfStepTitle')}</th>
              </tr>
            </thead>
            <tbody>
              {(s.workflow.steps ?? []).map((st) => (
                <tr key={st.key} data-testid="schedule-wf-step" data-key={st.key}>
                  <td className="mono">{st.key}</td>
                  <td>{st.type}</td>
                  <td className="mono">{st.dependsOn?.length ? st.dependsOn.join(', ') : '—'}</td>
                  <td>{st.title || '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      {s.workflow && (
        <section className="card">
          <h2>
            {t('sched.workflows')} <span className="muted">({s.workflows.totalCount})</span>
          </h2>
          <table className="table" data-testid="schedule-workflows">
            <thead>
              <tr>
                <th>{t('sched.slot')}</th>
                <th>{t('wf.code')}</th>
                <th>{t('wf.status')}</th>
                <th>{t('wf.progress')}</th>
              </tr>
            </thead>
            <tbody>
              {s.workflows.edges.map(({ node: w }) => (
                <tr key={w.id} data-testid="schedule-workflow-row" data-workflow-id={w.id}>
                  <td>{formatDateTime(w.scheduleSlot, locale)}</td>
                  <td className="mono">
                    <Link to={`/workflows/${w.id}`}>{w.code}</Link>
                  </td>
                  <td>
                    <StatusChip status={w.status} />
                  </td>
                  <td>
                    <ProgressBar done={w.stepsDone} total={w.stepCount} status={w.status} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      {!s.workflow && (
        <section className="card">
          <h2>
            {t('sched.tasks')} <span className="muted">({s.tasks.totalCount})</span>
          </h2>
          <table className="table" data-testid="schedule-tasks">
            <thead>
              <tr>
                <th>{t('sched.slot')}</th>
                <th>{t('list.col.code')}</th>
                <th>{t('list.col.status')}</th>
              </tr>
            </thead>
            <tbody>
              {s.tasks.edges.map(({ node: tk }) => (
                <tr key={tk.id} data-testid="schedule-task">
                  <td>{formatDateTime(tk.scheduleSlot, locale)}</td>
                  <td>
                    <Link to={`/tasks/${tk.id}`}>{tk.code}</Link>
                  </td>
                  <td>
                    <StatusChip status={tk.status} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      <section className="card">
        <h2>{t('sched.log')}</h2>
        <ol className="schedule-log" data-testid="schedule-log">
          {[...s.events.edges].reverse().map(({ node: e }) => (
            <li key={e.id} data-kind={e.kind}>
              <span className="muted small">{formatDateTime(e.createdAt, locale)}</span> <strong>{e.kind}</strong> {e.message}
            </li>
          ))}
        </ol>
      </section>
    </div>
  );
}
