import { useMemo, useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { fieldProblems, fromCombined } from '../api/errors';
import { CREATE_TASK, TASK_TYPES, type RetryPolicy, type TaskRow, type TaskType } from '../api/queries';
import { ErrorBox } from '../components/ErrorBox';
import { SchemaForm } from '../components/SchemaForm';
import { useI18n, type Translate } from '../i18n';
import { buildInput, canUseForm, emptyValues, fieldsOf, type FieldError, type FormValues } from '../lib/schemaForm';
import { fromLocalInput } from '../lib/time';
import { Link, navigate } from '../router';

// Task types started by an upload (the Import page), not by a form.
export const UPLOAD_ONLY = ['import'];

interface TypesData {
  taskTypes: TaskType[];
  retryPolicies: RetryPolicy[];
}

export function Launch({ type }: { type: string | null }) {
  const { t } = useI18n();
  const [res] = useQuery<TypesData>({ query: TASK_TYPES });
  // An import needs a file: it is launched from the Import page, not from
  // a form asking for an uploaded file's key.
  const types = (res.data?.taskTypes ?? []).filter((x) => !UPLOAD_ONLY.includes(x.name));
  const selected = type ? types.find((x) => x.name === type) : undefined;

  return (
    <div className="page" data-testid="page-launch">
      <h1>{t('launch.title')}</h1>
      {res.error && <ErrorBox error={res.error} />}
      <nav className="type-tabs" aria-label={t('launch.pickType')}>
        {types.map((ty) => (
          <Link key={ty.name} to={`/launch/${encodeURIComponent(ty.name)}`} className={`type-tab ${ty.name === type ? 'active' : ''}`} aria-current={ty.name === type ? 'page' : undefined} data-testid={`launch-type-${ty.name}`}>
            <strong>{ty.name}</strong>
            <span className="muted small">{ty.description}</span>
          </Link>
        ))}
      </nav>
      {type && UPLOAD_ONLY.includes(type) && (
        <p className="notice" data-testid="launch-use-import">
          {t('launch.useImport')} <Link to="/import">{t('nav.import')}</Link>
        </p>
      )}
      {type && res.data && !selected && !UPLOAD_ONLY.includes(type) && <p className="error-box">{t('launch.unknownType', { type })}</p>}
      {selected && <LaunchForm key={selected.name} type={selected} policies={res.data?.retryPolicies ?? []} />}
      {!type && res.data && <p className="muted">{t('launch.pickType')}</p>}
    </div>
  );
}

interface Options {
  title: string;
  bizId: string;
  priority: string;
  retryPolicy: string;
  maxAttempts: string;
  timeoutSeconds: string;
  runAt: string;
  idempotencyKey: string;
}

const NO_OPTIONS: Options = { title: '', bizId: '', priority: '', retryPolicy: '', maxAttempts: '', timeoutSeconds: '', runAt: '', idempotencyKey: '' };

// policyLabel names a retry policy with its attempts: "default (3 attempts)".
export function policyLabel(name: string, policies: RetryPolicy[], t: Translate): string {
  const p = policies.find((x) => x.name === name);
  if (!p) return name;
  return t(p.maxAttempts === 1 ? 'launch.policyOneAttempt' : 'launch.policyAttempts', { name, n: p.maxAttempts });
}

function intOrNull(s: string): number | null {
  if (s.trim() === '') return null;
  const n = Number(s);
  return Number.isInteger(n) ? n : NaN;
}

function LaunchForm({ type, policies }: { type: TaskType; policies: RetryPolicy[] }) {
  const { t } = useI18n();
  const fields = useMemo(() => fieldsOf(type.inputSchema), [type]);
  const formOk = canUseForm(type.inputSchema);
  const [raw, setRaw] = useState(!formOk);
  const [values, setValues] = useState<FormValues>(() => emptyValues(fields));
  const [json, setJson] = useState('{}');
  const [opts, setOpts] = useState<Options>(NO_OPTIONS);
  const [errors, setErrors] = useState<Record<string, FieldError>>({});
  const [state, create] = useMutation<{ createTask: TaskRow }>(CREATE_TASK);
  const [submitted, setSubmitted] = useState(false);
  const serverErrors = useMemo(() => fieldProblems(fromCombined(state.error)), [state.error]);
  const opt = (k: keyof Options) => ({
    value: opts[k],
    onChange: (e: { target: { value: string } }) => setOpts((o) => ({ ...o, [k]: e.target.value })),
    'data-testid': `opt-${k}`,
    id: `opt-${k}`,
  });

  const switchMode = () => {
    if (!raw) {
      const { input } = buildInput(fields, values);
      setJson(JSON.stringify(input, null, 2));
    }
    setRaw(!raw);
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    let input: unknown;
    const errs: Record<string, FieldError> = {};
    if (raw) {
      try {
        input = JSON.parse(json || '{}');
      } catch (err) {
        errs._json = { key: 'launch.badJson', vars: { msg: (err as Error).message } };
      }
    } else {
      const built = buildInput(fields, values);
      Object.assign(errs, built.errors);
      input = built.input;
    }
    const priority = intOrNull(opts.priority);
    const maxAttempts = intOrNull(opts.maxAttempts);
    const timeoutSeconds = intOrNull(opts.timeoutSeconds);
    if (Number.isNaN(priority)) errs.priority = { key: 'launch.notInteger' };
    if (Number.isNaN(maxAttempts)) errs.maxAttempts = { key: 'launch.notInteger' };
    if (Number.isNaN(timeoutSeconds)) errs.timeoutSeconds = { key: 'launch.notInteger' };
    setErrors(errs);
    if (Object.keys(errs).length) return;
    setSubmitted(true);
    const r = await create({
      input: {
        type: type.name,
        input,
        title: opts.title.trim() || null,
        bizId: opts.bizId.trim() || null,
        priority,
        retryPolicy: opts.retryPolicy || null,
        maxAttempts,
        timeoutSeconds,
        runAt: fromLocalInput(opts.runAt),
        idempotencyKey: opts.idempotencyKey.trim() || null,
      },
    });
    setSubmitted(false);
    const created = r.data?.createTask;
    if (created) navigate(`/tasks/${created.id}`);
  };

  const optErr = (k: string) => (errors[k] ? t(errors[k].key, errors[k].vars) : serverErrors[k]);

  return (
    <form className="card launch-form" onSubmit={submit} noValidate data-testid="launch-form">
      <h2>{type.name}</h2>
      <p className="muted">
        {type.description} · {t('launch.defaults', { timeout: type.defaultTimeoutSeconds, policy: type.defaultRetryPolicy })}
      </p>
      <fieldset>
        <legend>
          {t('launch.input')}{' '}
          {formOk && (
            <button type="button" className="btn btn-ghost btn-small" onClick={switchMode} data-testid="toggle-raw">
              {raw ? t('launch.formMode') : t('launch.rawJson')}
            </button>
          )}
        </legend>
        {raw ? (
          <div className="field">
            <textarea rows={8} className="mono" value={json} onChange={(e) => setJson(e.target.value)} data-testid="input-json" aria-label={t('launch.input')} aria-invalid={!!errors._json} />
            {errors._json && <small className="field-error">{t(errors._json.key, errors._json.vars)}</small>}
            {serverErrors.input && <small className="field-error">{serverErrors.input}</small>}
          </div>
        ) : (
          <SchemaForm fields={fields} values={values} onChange={(name, v) => setValues((cur) => ({ ...cur, [name]: v }))} errors={errors} serverErrors={serverErrors} />
        )}
      </fieldset>
      <fieldset>
        <legend>{t('launch.options')}</legend>
        <div className="options-grid">
          <div className="field">
            <label htmlFor="opt-title">{t('launch.title.field')}</label>
            <input {...opt('title')} maxLength={200} />
          </div>
          <div className="field">
            <label htmlFor="opt-bizId">{t('launch.bizId')}</label>
            <input {...opt('bizId')} maxLength={200} />
          </div>
          <div className="field">
            <label htmlFor="opt-priority">{t('launch.priority')}</label>
            <input {...opt('priority')} type="number" min={0} max={100} placeholder="5" />
            {optErr('priority') && <small className="field-error">{optErr('priority')}</small>}
          </div>
          <div className="field">
            <label htmlFor="opt-retryPolicy">{t('launch.retryPolicy')}</label>
            <select {...opt('retryPolicy')}>
              <option value="">{t('launch.policyTypeDefault', { policy: policyLabel(type.defaultRetryPolicy, policies, t) })}</option>
              {policies.map((p) => (
                <option key={p.name} value={p.name}>
                  {policyLabel(p.name, policies, t)}
                </option>
              ))}
            </select>
            {optErr('retryPolicy') && <small className="field-error">{optErr('retryPolicy')}</small>}
          </div>
          <div className="field">
            <label htmlFor="opt-maxAttempts">{t('launch.maxAttempts')}</label>
            <input {...opt('maxAttempts')} type="number" min={1} max={25} />
            {optErr('maxAttempts') && <small className="field-error">{optErr('maxAttempts')}</small>}
          </div>
          <div className="field">
            <label htmlFor="opt-timeoutSeconds">{t('launch.timeout')}</label>
            <input {...opt('timeoutSeconds')} type="number" min={1} placeholder={String(type.defaultTimeoutSeconds)} />
            {optErr('timeoutSeconds') && <small className="field-error">{optErr('timeoutSeconds')}</small>}
          </div>
          <div className="field">
            <label htmlFor="opt-runAt">{t('launch.runAt')}</label>
            <input {...opt('runAt')} type="datetime-local" step={1} />
          </div>
          <div className="field">
            <label htmlFor="opt-idempotencyKey">{t('launch.idempotencyKey')}</label>
            <input {...opt('idempotencyKey')} maxLength={200} />
          </div>
        </div>
      </fieldset>
      {state.error && <ErrorBox error={state.error} />}
      <div className="form-actions">
        <button type="submit" className="btn btn-primary" disabled={submitted || state.fetching} data-testid="launch-submit">
          {submitted || state.fetching ? t('launch.submitting') : t('launch.submit')}
        </button>
      </div>
    </form>
  );
}
