// Schedules: the list, and a form that creates one with a live preview of
// its next fire times (schedulePreview, as the expression is typed). A
// schedule creates a task at each slot, or a whole workflow: its steps are
// edited as JSON, parsed here (a syntax error sends nothing) and checked by
// the server (a cycle, an unknown key or type: VALIDATION, at the field).
import { useEffect, useMemo, useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { fieldProblems, fromCombined } from '../api/errors';
import {
  CREATE_SCHEDULE,
  MISFIRE_POLICIES,
  OVERLAP_POLICIES,
  PARENT_FAILURE_POLICIES,
  SCHEDULE_PREVIEW,
  SCHEDULES,
  TASK_TYPES,
  type MisfirePolicy,
  type OverlapPolicy,
  type ParentFailurePolicy,
  type ScheduleRow,
  type TaskType,
} from '../api/queries';
import { ErrorBox } from '../components/ErrorBox';
import { useI18n, type MessageKey } from '../i18n';
import { formatDateTime, fromLocalInput } from '../lib/time';
import { Link, navigate } from '../router';

export function Schedules() {
  const { t, locale } = useI18n();
  const [res] = useQuery<{ schedules: { totalCount: number; edges: { node: ScheduleRow }[] } }>({ query: SCHEDULES });
  const [creating, setCreating] = useState(false);
  const rows = res.data?.schedules.edges.map((e) => e.node) ?? [];
  return (
    <div className="page" data-testid="page-schedules">
      <div className="page-head">
        <h1>{t('sched.title')}</h1>
        <button type="button" className="btn" onClick={() => setCreating((c) => !c)} data-testid="schedule-new">
          {creating ? t('sched.close') : t('sched.new')}
        </button>
      </div>
      {creating && <ScheduleForm />}
      {res.error && <ErrorBox error={res.error} />}
      <section className="card">
        {rows.length === 0 && res.data && <p className="muted">{t('sched.none')}</p>}
        {rows.length > 0 && (
          <table className="table" data-testid="schedule-table">
            <thead>
              <tr>
                <th>{t('sched.name')}</th>
                <th>{t('sched.when')}</th>
                <th>{t('sched.task')}</th>
                <th>{t('sched.next')}</th>
                <th>{t('sched.state')}</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.id} data-testid="schedule-row">
                  <td>
                    <Link to={`/schedules/${s.id}`}>{s.name}</Link>
                  </td>
                  <td>
                    <code>{describe(s, t)}</code> <span className="muted small">{s.effectiveTimezone}</span>
                  </td>
                  <td data-testid="schedule-what">{scheduleWhat(s, t)}</td>
                  <td>{s.paused ? '—' : formatDateTime(s.nextFireAt, locale)}</td>
                  <td>{s.paused ? t('sched.paused') : s.nextFireAt ? t('sched.active') : t('sched.ended')}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
    </div>
  );
}

export function describe(s: Pick<ScheduleRow, 'cron' | 'intervalSeconds'>, t: ReturnType<typeof useI18n>['t']): string {
  return s.cron || t('sched.every', { n: s.intervalSeconds ?? 0 });
}

// scheduleWhat says what a schedule creates: its task's type, or its
// workflow's title and size.
export function scheduleWhat(s: Pick<ScheduleRow, 'taskType' | 'workflow'>, t: ReturnType<typeof useI18n>['t']): string {
  if (!s.workflow) return s.taskType;
  const steps = t('sched.workflowSteps', { n: s.workflow.steps?.length ?? 0 });
  return s.workflow.title ? `${s.workflow.title} · ${steps}` : steps;
}

// exampleSteps is the steps the workflow editor starts with: two steps of a
// registered type, the second waiting for the first.
export function exampleSteps(type: string): string {
  return JSON.stringify(
    [
      { key: 'first', type, input: {} },
      { key: 'second', type, input: {}, dependsOn: ['first'] },
    ],
    null,
    2,
  );
}

// parseSteps reads the steps editor: a JSON array of objects, or an error
// to show at the field (nothing is sent then).
export function parseSteps(text: string, t: ReturnType<typeof useI18n>['t']): { steps?: unknown[]; error?: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { error: t('sched.wfStepsSyntax', { message: (err as Error).message }) };
  }
  if (!Array.isArray(v) || v.some((x) => x === null || typeof x !== 'object' || Array.isArray(x))) return { error: t('sched.wfStepsNotArray') };
  return { steps: v };
}

// workflowProblems gathers the server's problems of a workflow's steps
// ("workflow.steps[1].dependsOn", "workflow.steps", "workflow.key"...):
// they are shown at the steps editor, each with where it is.
export function workflowProblems(problems: Record<string, string>): string[] {
  const out: string[] = [];
  for (const [k, msg] of Object.entries(problems)) {
    if (k !== 'workflow' && !k.startsWith('workflow.')) continue;
    if (k === 'workflow.title' || k === 'workflow.onParentFailure') continue;
    const where = k.slice('workflow.'.length);
    out.push(where && where !== 'steps' ? `${where}: ${msg}` : msg);
  }
  return out;
}

interface Form {
  name: string;
  mode: 'cron' | 'interval';
  cron: string;
  interval: string;
  timezone: string;
  startAt: string;
  endAt: string;
  misfire: MisfirePolicy;
  overlap: OverlapPolicy;
  type: string;
  title: string;
  input: string;
  creates: 'task' | 'workflow';
  wfTitle: string;
  wfPolicy: ParentFailurePolicy;
  wfSteps: string;
}

const EMPTY: Form = {
  name: '',
  mode: 'cron',
  cron: '*/10 * * * * *',
  interval: '60',
  timezone: '',
  startAt: '',
  endAt: '',
  misfire: 'SKIP',
  overlap: 'SKIP',
  type: 'noop',
  title: '',
  input: '{}',
  creates: 'task',
  wfTitle: '',
  wfPolicy: 'CANCEL_DEPENDENTS',
  wfSteps: exampleSteps('noop'),
};

// useDebounced returns value once it has stopped changing for ms.
function useDebounced<T>(value: T, ms: number): T {
  const [v, setV] = useState(value);
  useEffect(() => {
    const h = setTimeout(() => setV(value), ms);
    return () => clearTimeout(h);
  }, [value, ms]);
  return v;
}

function ScheduleForm() {
  const { t, locale } = useI18n();
  const [f, setF] = useState<Form>(EMPTY);
  const [types] = useQuery<{ taskTypes: TaskType[] }>({ query: TASK_TYPES });
  const [state, create] = useMutation<{ createSchedule: ScheduleRow }>(CREATE_SCHEDULE);
  const [jsonError, setJsonError] = useState('');
  const [stepsError, setStepsError] = useState('');
  // The example's type is a registered one: noop where there is one, else
  // the first type (while the example is not edited yet).
  const typeNames = types.data?.taskTypes.map((ty) => ty.name);
  useEffect(() => {
    if (!typeNames?.length || typeNames.includes('noop')) return;
    setF((x) => (x.wfSteps === exampleSteps('noop') ? { ...x, wfSteps: exampleSteps(typeNames[0]) } : x));
  }, [typeNames?.join(',')]);
  const set = (k: keyof Form) => (e: { target: { value: string } }) => setF((x) => ({ ...x, [k]: e.target.value }));
  const field = (k: keyof Form) => ({ id: `sched-${k}`, 'data-testid': `sched-${k}`, value: f[k], onChange: set(k) });

  const spec = useMemo(() => {
    const interval = Number(f.interval);
    return {
      cron: f.mode === 'cron' ? f.cron : null,
      intervalSeconds: f.mode === 'interval' ? (Number.isInteger(interval) ? interval : -1) : null,
      timezone: f.timezone.trim() || null,
      startAt: fromLocalInput(f.startAt),
      endAt: fromLocalInput(f.endAt),
    };
  }, [f.mode, f.cron, f.interval, f.timezone, f.startAt, f.endAt]);
  const previewSpec = useDebounced(spec, 250);
  const [preview] = useQuery<{ schedulePreview: string[] }>({
    query: SCHEDULE_PREVIEW,
    variables: { input: previewSpec, count: 5 },
    requestPolicy: 'network-only',
  });
  const previewProblems = fieldProblems(fromCombined(preview.error));
  const serverErrors = fieldProblems(fromCombined(state.error));

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    let what: Record<string, unknown>;
    if (f.creates === 'workflow') {
      const { steps, error } = parseSteps(f.wfSteps, t);
      setStepsError(error ?? '');
      if (!steps) return;
      what = { workflow: { title: f.wfTitle.trim() || null, onParentFailure: f.wfPolicy, steps } };
    } else {
      let input: unknown;
      try {
        input = JSON.parse(f.input || '{}');
        setJsonError('');
      } catch (err) {
        setJsonError((err as Error).message);
        return;
      }
      what = { task: { type: f.type, title: f.title.trim() || null, input } };
    }
    const r = await create({
      input: {
        name: f.name,
        ...spec,
        misfirePolicy: f.misfire,
        overlapPolicy: f.overlap,
        ...what,
      },
    });
    const created = r.data?.createSchedule;
    if (created) navigate(`/schedules/${created.id}`);
  };
  const err = (k: string) => serverErrors[k] && <span className="field-error">{serverErrors[k]}</span>;
  const stepProblems = workflowProblems(serverErrors);

  return (
    <form className="card schedule-form" onSubmit={submit} noValidate data-testid="schedule-form">
      <h2>{t('sched.new')}</h2>
      <div className="form-grid">
        <label htmlFor="sched-name">{t('sched.name')}</label>
        <div>
          <input {...field('name')} required />
          {err('name')}
        </div>
        <label htmlFor="sched-mode">{t('sched.when')}</label>
        <div className="row">
          <select {...field('mode')}>
            <option value="cron">{t('sched.cron')}</option>
            <option value="interval">{t('sched.interval')}</option>
          </select>
          {f.mode === 'cron' ? <input {...field('cron')} placeholder="*/10 * * * * *" /> : <input {...field('interval')} inputMode="numeric" />}
          {err('cron')}
          {err('intervalSeconds')}
        </div>
        <label htmlFor="sched-timezone">{t('sched.timezone')}</label>
        <div>
          <input {...field('timezone')} placeholder={t('sched.serverZone')} list="sched-zones" />
          <datalist id="sched-zones">
            {['UTC', 'Asia/Shanghai', 'Europe/London', 'America/New_York'].map((z) => (
              <option key={z} value={z} />
            ))}
          </datalist>
          {err('timezone')}
        </div>
        <label htmlFor="sched-startAt">{t('sched.startAt')}</label>
        <input type="datetime-local" step="1" {...field('startAt')} />
        <label htmlFor="sched-endAt">{t('sched.endAt')}</label>
        <div>
          <input type="datetime-local" step="1" {...field('endAt')} />
          {err('endAt')}
        </div>
        <label htmlFor="sched-misfire">{t('sched.misfire')}</label>
        <select {...field('misfire')}>
          {MISFIRE_POLICIES.map((p) => (
            <option key={p} value={p}>
              {t(`sched.misfire.${p}` as MessageKey)}
            </option>
          ))}
        </select>
        <label htmlFor="sched-overlap">{t('sched.overlap')}</label>
        <select {...field('overlap')}>
          {OVERLAP_POLICIES.map((p) => (
            <option key={p} value={p}>
              {t(`sched.overlap.${p}` as MessageKey)}
            </option>
          ))}
        </select>
        <label htmlFor="sched-creates">{t('sched.creates')}</label>
        <div>
          <select {...field('creates')}>
            <option value="task">{t('sched.createsTask')}</option>
            <option value="workflow">{t('sched.createsWorkflow')}</option>
          </select>
          {err('task')}
        </div>
        {f.creates === 'task' ? (
          <>
            <label htmlFor="sched-type">{t('sched.task')}</label>
            <div>
              <select {...field('type')}>
                {(types.data?.taskTypes ?? [{ name: f.type }]).map((ty) => (
                  <option key={ty.name} value={ty.name}>
                    {ty.name}
                  </option>
                ))}
              </select>
              {err('task.type')}
            </div>
            <label htmlFor="sched-title">{t('sched.taskTitle')}</label>
            <input {...field('title')} />
            <label htmlFor="sched-input">{t('sched.taskInput')}</label>
            <div>
              <textarea rows={4} {...field('input')} spellCheck={false} />
              {jsonError && <span className="field-error">{jsonError}</span>}
              {err('task.input')}
            </div>
          </>
        ) : (
          <>
            <label htmlFor="sched-wfTitle">{t('sched.wfTitle')}</label>
            <div>
              <input {...field('wfTitle')} />
              {err('workflow.title')}
            </div>
            <label htmlFor="sched-wfPolicy">{t('sched.wfPolicy')}</label>
            <div>
              <select {...field('wfPolicy')}>
                {PARENT_FAILURE_POLICIES.map((p) => (
                  <option key={p} value={p}>
                    {t(`wf.policy.${p}` as MessageKey)}
                  </option>
                ))}
              </select>
              {err('workflow.onParentFailure')}
            </div>
            <label htmlFor="sched-wfSteps">{t('sched.wfSteps')}</label>
            <div>
              <textarea rows={10} {...field('wfSteps')} spellCheck={false} className="mono" />
              <span className="muted small">{t('sched.wfStepsHint')}</span>
              {stepsError && (
                <span className="field-error" data-testid="sched-wfSteps-error">
                  {stepsError}
                </span>
              )}
              {stepProblems.length > 0 && (
                <span className="field-error" data-testid="sched-wfSteps-problems">
                  {stepProblems.join('; ')}
                </span>
              )}
            </div>
          </>
        )}
      </div>
      <div className="preview" data-testid="schedule-preview" aria-live="polite">
        <h3>{t('sched.preview')}</h3>
        {preview.error ? (
          <p className="field-error" data-testid="schedule-preview-error">
            {Object.values(previewProblems).join('; ') || fromCombined(preview.error)[0]?.message}
          </p>
        ) : (
          <ol>
            {(preview.data?.schedulePreview ?? []).map((at) => (
              <li key={at} data-testid="schedule-preview-time" data-at={at}>
                {formatDateTime(at, locale)}
              </li>
            ))}
          </ol>
        )}
      </div>
      {state.error && <ErrorBox error={state.error} />}
      <button type="submit" className="btn btn-primary" disabled={state.fetching} data-testid="schedule-submit">
        {t('sched.create')}
      </button>
    </form>
  );
}
