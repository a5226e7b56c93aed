// Tenants: each tenant's quota across all its task types (docs/access.md,
// Quotas). Platform administrators list every tenant that has one and set
// them; a tenant's admins read their own, read-only.
import { useState, type FormEvent } from 'react';
import { gql, useMutation, useQuery } from 'urql';
import { fieldProblems, fromCombined } from '../api/errors';
import { ErrorBox } from '../components/ErrorBox';
import { useI18n, type MessageKey } from '../i18n';
import { formatDateTime } from '../lib/time';

/**
 * The limits of TenantQuotaInput, in the form's order. A new numeric limit
 * of the API is one entry here (integer: an Int; false: a Float), its name
 * in the key type, and its label (tenants.field.<key>) in i18n: the query,
 * the cards and the form follow from this list.
 */
export const QUOTA_FIELDS: readonly {
  key: 'weight' | 'maxRunning' | 'rateLimit' | 'ratePeriodSeconds' | 'maxWaiting' | 'maxSchedules' | 'minScheduleIntervalSeconds';
  integer: boolean;
}[] = [
  { key: 'weight', integer: true },
  { key: 'maxRunning', integer: true },
  { key: 'rateLimit', integer: true },
  { key: 'ratePeriodSeconds', integer: true },
  { key: 'maxWaiting', integer: true },
  { key: 'maxSchedules', integer: true },
  { key: 'minScheduleIntervalSeconds', integer: true },
];

/** A limit of a tenant's quota (a new one is added to QUOTA_FIELDS' key type too). */
export type QuotaKey = (typeof QUOTA_FIELDS)[number]['key'];

/** A tenant's quota and usage, as tenantQuotas answers. */
export type TenantQuota = {
  tenant: string;
  running: number;
  waiting: number;
  schedules: number;
  startedInWindow: number;
  nextStartAt: string | null;
  updatedBy: string | null;
  updatedAt: string | null;
} & Record<QuotaKey, number | null>;

const QUOTA = `tenant ${QUOTA_FIELDS.map((f) => f.key).join(' ')} running waiting schedules startedInWindow nextStartAt updatedBy updatedAt`;

export const TENANT_QUOTAS = gql(`query TenantQuotas { tenantQuotas { ${QUOTA} } }`);
export const SET_TENANT_QUOTA = gql(`mutation SetTenantQuota($tenant: String!, $input: TenantQuotaInput!) { setTenantQuota(tenant: $tenant, input: $input) { ${QUOTA} } }`);

/** The form's text of each limit. */
export type QuotaDraft = Record<QuotaKey, string>;

/** draftOf is the form's text of a quota (empty: no limit). */
export function draftOf(q: Partial<Record<QuotaKey, number | null>> | null): QuotaDraft {
  return Object.fromEntries(QUOTA_FIELDS.map((f) => [f.key, q?.[f.key] == null ? '' : String(q[f.key])])) as QuotaDraft;
}

/**
 * quotaInput is setTenantQuota's input of a draft: an empty field is null
 * (no limit), a whole number (or, for a field that is not integer, any
 * number) is itself; others are listed in bad (the API checks the ranges
 * and says so in its VALIDATION problems).
 */
export function quotaInput(d: QuotaDraft): { input: Record<QuotaKey, number | null>; bad: QuotaKey[] } {
  const input = {} as Record<QuotaKey, number | null>;
  const bad: QuotaKey[] = [];
  for (const f of QUOTA_FIELDS) {
    const s = d[f.key].trim();
    if (s === '') input[f.key] = null;
    else if (f.integer ? /^-?\d+$/.test(s) && Number.isSafeInteger(Number(s)) : s !== '' && Number.isFinite(Number(s))) input[f.key] = Number(s);
    else bad.push(f.key);
  }
  return { input, bad };
}

export function Tenants({ platform }: { platform: boolean }) {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ tenantQuotas: TenantQuota[] }>({ query: TENANT_QUOTAS });
  const [editing, setEditing] = useState<string | null>(null);
  const rows = res.data?.tenantQuotas ?? [];
  return (
    <div className="page" data-testid="page-tenants">
      <h1>{t('tenants.title')}</h1>
      <p className="muted">{platform ? t('tenants.intro') : t('tenants.readOnly')}</p>
      {res.error && <ErrorBox error={res.error} />}
      {res.data && rows.length === 0 && <p className="empty muted">{t('tenants.none')}</p>}
      <div className="type-cards">
        {rows.map((q) => (
          <section key={q.tenant} className="card" data-testid="tenant-quota" data-tenant={q.tenant}>
            <div className="page-head">
              <h2>{q.tenant || t('tenants.defaultTenant')}</h2>
              {platform && editing !== q.tenant && (
                <button type="button" className="btn btn-small" onClick={() => setEditing(q.tenant)} data-testid="tenant-edit">
                  {t('tenants.edit')}
                </button>
              )}
            </div>
            {editing === q.tenant ? (
              <QuotaForm
                tenant={q.tenant}
                initial={q}
                onDone={() => {
                  setEditing(null);
                  reexecute({ requestPolicy: 'network-only' });
                }}
                onCancel={() => setEditing(null)}
              />
            ) : (
              <QuotaView q={q} />
            )}
          </section>
        ))}
      </div>
      {platform && (
        <section className="card" data-testid="tenant-new">
          <h2>{t('tenants.new')}</h2>
          <QuotaForm tenant={null} initial={null} onDone={() => reexecute({ requestPolicy: 'network-only' })} />
        </section>
      )}
    </div>
  );
}

function QuotaView({ q }: { q: TenantQuota }) {
  const { t, locale } = useI18n();
  return (
    <>
      <dl className="kv">
        {QUOTA_FIELDS.map((f) => (
          <div key={f.key}>
            <dt>{t(`tenants.field.${f.key}` as MessageKey)}</dt>
            <dd data-testid={`quota-${f.key}`} data-value={q[f.key] ?? ''}>
              {q[f.key] ?? <span className="muted">{t('tenants.noLimit')}</span>}
            </dd>
          </div>
        ))}
      </dl>
      <p className="small" data-testid="quota-usage">
        {t('tenants.usage', { running: q.running, waiting: q.waiting, schedules: q.schedules })}
      </p>
      {q.rateLimit != null && (
        <p className="small" data-testid="quota-rate-usage" data-started={q.startedInWindow}>
          {t('tenants.rateUsage', { started: q.startedInWindow, limit: q.rateLimit, period: q.ratePeriodSeconds ?? 1 })}
          {q.nextStartAt && <> — {t('tenants.rateNext', { at: formatDateTime(q.nextStartAt, locale) })}</>}
        </p>
      )}
      {q.updatedBy && <p className="muted small">{t('tenants.updated', { who: q.updatedBy, at: formatDateTime(q.updatedAt, locale) })}</p>}
    </>
  );
}

// QuotaForm sets a tenant's quota (tenant null: the form names it).
function QuotaForm({ tenant, initial, onDone, onCancel }: { tenant: string | null; initial: TenantQuota | null; onDone: () => void; onCancel?: () => void }) {
  const { t } = useI18n();
  const [name, setName] = useState('');
  const [draft, setDraft] = useState<QuotaDraft>(() => draftOf(initial));
  const [bad, setBad] = useState<QuotaKey[]>([]);
  const [saved, setSaved] = useState(false);
  // The API's answer to the last send, hidden once the form refuses one itself.
  const [showApi, setShowApi] = useState(true);
  const [state, save] = useMutation<{ setTenantQuota: TenantQuota }>(SET_TENANT_QUOTA);
  const errors = showApi ? fromCombined(state.error) : [];
  const problems = fieldProblems(errors);
  // Problems of no field of the form (FORBIDDEN, QUOTA...) show in the box.
  const shown = new Set<string>(QUOTA_FIELDS.map((f) => f.key));
  const boxed = errors.filter((e) => e.code !== 'VALIDATION' || Object.keys(fieldProblems([e])).some((k) => !shown.has(k)));
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    const { input, bad } = quotaInput(draft);
    setBad(bad);
    setShowApi(bad.length === 0);
    if (bad.length > 0) return;
    const r = await save({ tenant: tenant ?? name.trim(), input });
    if (!r.error) {
      setSaved(true);
      if (tenant === null) {
        setName('');
        setDraft(draftOf(null));
      }
      onDone();
    }
  };
  return (
    <form className="row" onSubmit={(e) => void submit(e)} noValidate data-testid="quota-form">
      {tenant === null && (
        <label>
          {t('tenants.tenant')}
          <input value={name} onChange={(e) => setName(e.target.value)} data-testid="quota-tenant" />
        </label>
      )}
      {QUOTA_FIELDS.map((f) => (
        <label key={f.key}>
          {t(`tenants.field.${f.key}` as MessageKey)}
          <input
            value={draft[f.key]}
            onChange={(e) => setDraft({ ...draft, [f.key]: e.target.value })}
            inputMode="numeric"
            placeholder="∞"
            title={t('tenants.emptyHint')}
            data-testid={`quota-input-${f.key}`}
          />
          {bad.includes(f.key) && (
            <span className="field-error" data-testid={`quota-error-${f.key}`}>
              {t(f.integer ? 'tenants.notInteger' : 'tenants.notNumber')}
            </span>
          )}
          {problems[f.key] && (
            <span className="field-error" data-testid={`quota-error-${f.key}`}>
              {problems[f.key]}
            </span>
          )}
        </label>
      ))}
      <button type="submit" className="btn btn-primary" disabled={state.fetching} data-testid="quota-save">
        {t('tenants.save')}
      </button>
      {onCancel && (
        <button type="button" className="btn btn-ghost" onClick={onCancel}>
          {t('tenants.cancel')}
        </button>
      )}
      {saved && !state.error && bad.length === 0 && (
        <span className="muted small" role="status" data-testid="quota-saved">
          {t('tenants.saved')}
        </span>
      )}
      {boxed.length > 0 && <ErrorBox errors={boxed} />}
    </form>
  );
}
