import { useCallback, useState, type FormEvent } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import {
  CHANNEL_KINDS,
  CREATE_CHANNEL,
  CREATE_RULE,
  DELETE_CHANNEL,
  DELETE_RULE,
  INCIDENT_CHANGED,
  INCIDENTS,
  RESOLVE_INCIDENT,
  RULE_FIELDS,
  RULE_KINDS,
  RULES,
  ruleInput,
  SILENCE_INCIDENT,
  SILENCE_RULE,
  TEST_CHANNEL,
  type AlertChannel,
  type AlertIncident,
  type AlertRule,
  type ChannelKind,
  type Delivery,
  type RuleKind,
} from '../api/alerts';
import { ErrorBox } from '../components/ErrorBox';
import { StatusChip } from '../components/StatusChip';
import { useI18n, type MessageKey } from '../i18n';
import { useNow, useOnReconnect, useThrottle } from '../lib/hooks';
import { formatDateTime } from '../lib/time';
import { Link, navigate, useLocation } from '../router';
import { RelativeTime } from '../components/RelativeTime';

type Tab = 'incidents' | 'rules' | 'channels';
const TABS: Tab[] = ['incidents', 'rules', 'channels'];

export function AlertsPage() {
  const { t } = useI18n();
  const { search } = useLocation();
  const tab = (TABS.find((x) => x === search.get('tab')) ?? 'incidents') as Tab;
  return (
    <div className="page" data-testid="page-alerts">
      <h1>{t('alerts.title')}</h1>
      <div className="status-filter" role="tablist">
        {TABS.map((x) => (
          <button
            key={x}
            type="button"
            role="tab"
            aria-selected={tab === x}
            className={`chip-toggle ${tab === x ? 'on chip-executing' : ''}`}
            onClick={() => navigate(x === 'incidents' ? '/alerts' : `/alerts?tab=${x}`)}
            data-testid={`alerts-tab-${x}`}
          >
            {t(`alerts.tab.${x}` as MessageKey)}
          </button>
        ))}
      </div>
      {tab === 'incidents' && <Incidents />}
      {tab === 'rules' && <Rules />}
      {tab === 'channels' && <Channels />}
    </div>
  );
}

const HOUR = 3600_000;

function Incidents() {
  const { t, locale } = useI18n();
  const now = useNow();
  const [showResolved, setShowResolved] = useState(false);
  const [res, reexecute] = useQuery<{ alertIncidents: (AlertIncident & { deliveries: Delivery[] })[] }>({
    query: INCIDENTS,
    variables: { status: showResolved ? null : 'OPEN' },
  });
  const refresh = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const throttled = useThrottle(refresh, 1000);
  useSubscription({ query: INCIDENT_CHANGED }, (_prev: unknown, data: unknown) => {
    throttled();
    return data;
  });
  useOnReconnect(refresh);
  const [silenceState, silence] = useMutation(SILENCE_INCIDENT);
  const [resolveState, resolve] = useMutation(RESOLVE_INCIDENT);
  const incidents = res.data?.alertIncidents ?? [];
  return (
    <section className="card" data-testid="incidents">
      <div className="section-head">
        <h2>{t('alerts.incidents')}</h2>
        <label className="field-check">
          <input type="checkbox" checked={showResolved} onChange={(e) => setShowResolved(e.target.checked)} data-testid="show-resolved" />
          {t('alerts.showResolved')}
        </label>
      </div>
      {res.error && <ErrorBox error={res.error} />}
      {silenceState.error && <ErrorBox error={silenceState.error} />}
      {resolveState.error && <ErrorBox error={resolveState.error} />}
      {incidents.length === 0 && !res.fetching && <p className="empty muted">{t('alerts.noIncidents')}</p>}
      <ul className="failure-list">
        {incidents.map((inc) => (
          <li key={inc.id} data-testid="incident" data-incident-id={inc.id} data-status={inc.status}>
            <div className="failure-head">
              <span className={`chip chip-${inc.status === 'OPEN' ? 'failed' : 'success'}`}>{t(`alerts.status.${inc.status}` as MessageKey)}</span>{' '}
              <strong>{inc.ruleName}</strong> <span className="mono small">{inc.subject}</span>{' '}
              <span className="muted small">
                {t(`alerts.kind.${inc.kind}` as MessageKey)} · {t('alerts.occurrences', { n: inc.occurrences })} ·{' '}
                <RelativeTime at={inc.openedAt} />
              </span>
            </div>
            <div className="error-text" data-testid="incident-summary">
              {inc.summary}
            </div>
            <div className="muted small">
              {inc.lastTask && (
                <>
                  {t('alerts.lastTask')}{' '}
                  <Link to={`/tasks/${inc.lastTask.id}`} className="mono" data-testid="incident-task">
                    {inc.lastTask.code}
                  </Link>{' '}
                  ·{' '}
                </>
              )}
              {inc.silencedUntil && new Date(inc.silencedUntil).getTime() > now
                ? t('alerts.silencedUntil', { at: formatDateTime(inc.silencedUntil, locale) })
                : inc.notified
                  ? t('alerts.notified')
                  : t('alerts.notNotified')}
              {inc.resolution && <> · {t(`alerts.resolution.${inc.resolution}` as MessageKey)}</>}
            </div>
            {inc.deliveries.length > 0 && (
              <div className="small" data-testid="deliveries">
                {t('alerts.deliveries')}{' '}
                {inc.deliveries.map((d) => (
                  <Link key={d.id} to={`/tasks/${d.id}`} title={d.lastError ?? ''} className="count-link">
                    <StatusChip status={d.status} testId="delivery-status" />
                  </Link>
                ))}
              </div>
            )}
            {inc.status === 'OPEN' && (
              <div className="actions">
                <button
                  type="button"
                  className="btn btn-small"
                  onClick={() => void silence({ id: inc.id, until: new Date(Date.now() + HOUR).toISOString() })}
                  data-testid="silence-incident"
                >
                  {t('alerts.silence1h')}
                </button>
                <button type="button" className="btn btn-small btn-ghost" onClick={() => void resolve({ id: inc.id })} data-testid="resolve-incident">
                  {t('alerts.resolve')}
                </button>
              </div>
            )}
          </li>
        ))}
      </ul>
    </section>
  );
}

function Rules() {
  const { t, locale } = useI18n();
  const now = useNow();
  const [res, reexecute] = useQuery<{ alertRules: AlertRule[]; alertChannels: AlertChannel[]; taskTypes: { name: string }[] }>({ query: RULES });
  const refresh = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const [createState, create] = useMutation(CREATE_RULE);
  const [deleteState, remove] = useMutation(DELETE_RULE);
  const [silenceState, silence] = useMutation(SILENCE_RULE);
  const [name, setName] = useState('');
  const [kind, setKind] = useState<RuleKind>('TASK_FAILED');
  const [taskType, setTaskType] = useState('');
  const [threshold, setThreshold] = useState(String(RULE_FIELDS.TASK_FAILED.threshold?.initial ?? ''));
  const [windowSeconds, setWindowSeconds] = useState(String(RULE_FIELDS.TASK_FAILED.windowSeconds?.initial ?? ''));
  const [quietSeconds, setQuietSeconds] = useState('0');
  const [channels, setChannels] = useState<string[]>([]);
  const rules = res.data?.alertRules ?? [];
  const allChannels = res.data?.alertChannels ?? [];
  const types = (res.data?.taskTypes ?? []).map((x) => x.name).filter((n) => !n.startsWith('alert.'));
  const fields = RULE_FIELDS[kind];
  // A kind's own defaults: a threshold of 5 failures is no clock skew.
  const chooseKind = (k: RuleKind) => {
    setKind(k);
    setThreshold(String(RULE_FIELDS[k].threshold?.initial ?? ''));
    setWindowSeconds(String(RULE_FIELDS[k].windowSeconds?.initial ?? ''));
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const r = await create({ input: ruleInput({ name, kind, taskType, threshold, windowSeconds, quietSeconds, channelIds: channels }) });
    if (!r.error) {
      setName('');
      refresh();
    }
  };
  return (
    <>
      <section className="card" data-testid="rules">
        <h2>{t('alerts.rules')}</h2>
        {res.error && <ErrorBox error={res.error} />}
        {deleteState.error && <ErrorBox error={deleteState.error} />}
        {silenceState.error && <ErrorBox error={silenceState.error} />}
        {rules.length === 0 && !res.fetching && <p className="empty muted">{t('alerts.noRules')}</p>}
        <div className="table-wrap">
          <table className="table">
            <tbody>
              {rules.map((r) => (
                <tr key={r.id} data-testid="rule" data-rule-name={r.name}>
                  <td>
                    <strong>{r.name}</strong>
                    {!r.enabled && <span className="muted small"> ({t('alerts.disabled')})</span>}
                  </td>
                  <td>{t(`alerts.kind.${r.kind}` as MessageKey)}</td>
                  <td className="mono small">{r.taskType || t('alerts.anyType')}</td>
                  <td className="small">{r.channels.map((c) => c.name).join(', ') || <span className="muted">—</span>}</td>
                  <td className="small">
                    {r.silencedUntil && new Date(r.silencedUntil).getTime() > now
                      ? t('alerts.silencedUntil', { at: formatDateTime(r.silencedUntil, locale) })
                      : r.lastNotifiedAt && <RelativeTime at={r.lastNotifiedAt} />}
                  </td>
                  <td className="actions">
                    <button type="button" className="btn btn-small" onClick={() => void silence({ id: r.id, until: new Date(Date.now() + HOUR).toISOString() })}>
                      {t('alerts.silence1h')}
                    </button>
                    <button type="button" className="btn btn-small btn-danger-outline" onClick={() => void remove({ id: r.id }).then(refresh)} data-testid="delete-rule">
                      {t('alerts.delete')}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
      <section className="card">
        <h2>{t('alerts.newRule')}</h2>
        <form onSubmit={(e) => void submit(e)} className="filters" data-testid="rule-form">
          <label className="field">
            <span>{t('alerts.name')}</span>
            <input value={name} onChange={(e) => setName(e.target.value)} required data-testid="rule-name" />
          </label>
          <label className="field">
            <span>{t('alerts.kind')}</span>
            <select value={kind} onChange={(e) => chooseKind(e.target.value as RuleKind)} data-testid="rule-kind">
              {RULE_KINDS.map((k) => (
                <option key={k} value={k}>
                  {t(`alerts.kind.${k}` as MessageKey)}
                </option>
              ))}
            </select>
          </label>
          {fields.taskType && (
            <label className="field">
              <span>{t('alerts.taskType')}</span>
              <select value={taskType} onChange={(e) => setTaskType(e.target.value)} data-testid="rule-type">
                <option value="">{t('alerts.anyType')}</option>
                {types.map((n) => (
                  <option key={n} value={n}>
                    {n}
                  </option>
                ))}
              </select>
            </label>
          )}
          {fields.threshold && (
            <label className="field">
              <span>{t(fields.threshold.label)}</span>
              <input type="number" min={fields.threshold.min} value={threshold} onChange={(e) => setThreshold(e.target.value)} data-testid="rule-threshold" />
            </label>
          )}
          {fields.windowSeconds && (
            <label className="field">
              <span>{t(fields.windowSeconds.label)}</span>
              <input type="number" min={fields.windowSeconds.min} value={windowSeconds} onChange={(e) => setWindowSeconds(e.target.value)} data-testid="rule-window" />
            </label>
          )}
          <label className="field">
            <span>{t('alerts.quiet')}</span>
            <input type="number" min={0} value={quietSeconds} onChange={(e) => setQuietSeconds(e.target.value)} data-testid="rule-quiet" />
          </label>
          <fieldset className="field">
            <span>{t('alerts.channels')}</span>
            {allChannels.length === 0 && <span className="muted small">{t('alerts.noChannels')}</span>}
            {allChannels.map((c) => (
              <label key={c.id} className="field-check">
                <input
                  type="checkbox"
                  checked={channels.includes(c.id)}
                  onChange={(e) => setChannels(e.target.checked ? [...channels, c.id] : channels.filter((x) => x !== c.id))}
                />
                {c.name}
              </label>
            ))}
          </fieldset>
          <button type="submit" className="btn btn-primary" disabled={createState.fetching} data-testid="rule-save">
            {t('alerts.create')}
          </button>
        </form>
        {createState.error && <ErrorBox error={createState.error} />}
      </section>
    </>
  );
}

function Channels() {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ alertRules: AlertRule[]; alertChannels: AlertChannel[] }>({ query: RULES });
  const refresh = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const [createState, create] = useMutation(CREATE_CHANNEL);
  const [deleteState, remove] = useMutation(DELETE_CHANNEL);
  const [testState, test] = useMutation<{ testAlertChannel: { id: string; code: string } }>(TEST_CHANNEL);
  const [name, setName] = useState('');
  const [kind, setKind] = useState<ChannelKind>('WEBHOOK');
  const [url, setUrl] = useState('');
  const [secret, setSecret] = useState('');
  const channels = res.data?.alertChannels ?? [];
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const r = await create({ input: { name, kind, url, secret: secret || null } });
    if (!r.error) {
      setName('');
      setUrl('');
      setSecret('');
      refresh();
    }
  };
  const sent = testState.data?.testAlertChannel;
  return (
    <>
      <section className="card" data-testid="channels">
        <h2>{t('alerts.channels')}</h2>
        {res.error && <ErrorBox error={res.error} />}
        {deleteState.error && <ErrorBox error={deleteState.error} />}
        {testState.error && <ErrorBox error={testState.error} />}
        {sent && (
          <p className="notice" role="status">
            {t('alerts.testSent')}{' '}
            <Link to={`/tasks/${sent.id}`} className="mono">
              {sent.code}
            </Link>
          </p>
        )}
        {channels.length === 0 && !res.fetching && <p className="empty muted">{t('alerts.noChannels')}</p>}
        <div className="table-wrap">
          <table className="table">
            <tbody>
              {channels.map((c) => (
                <tr key={c.id} data-testid="channel">
                  <td>
                    <strong>{c.name}</strong>
                  </td>
                  <td>{c.kind}</td>
                  <td className="mono small ellipsis">{c.urlDisplay}</td>
                  <td className="small">{c.hasSecret ? t('alerts.signed') : ''}</td>
                  <td className="actions">
                    <button type="button" className="btn btn-small" onClick={() => void test({ id: c.id })}>
                      {t('alerts.test')}
                    </button>
                    <button type="button" className="btn btn-small btn-danger-outline" onClick={() => void remove({ id: c.id }).then(refresh)}>
                      {t('alerts.delete')}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
      <section className="card">
        <h2>{t('alerts.newChannel')}</h2>
        <form onSubmit={(e) => void submit(e)} className="filters" data-testid="channel-form">
          <label className="field">
            <span>{t('alerts.name')}</span>
            <input value={name} onChange={(e) => setName(e.target.value)} required data-testid="channel-name" />
          </label>
          <label className="field">
            <span>{t('alerts.kind')}</span>
            <select value={kind} onChange={(e) => setKind(e.target.value as ChannelKind)} data-testid="channel-kind">
              {CHANNEL_KINDS.map((k) => (
                <option key={k} value={k}>
                  {k}
                </option>
              ))}
            </select>
          </label>
          <label className="field grow">
            <span>{t('alerts.url')}</span>
            <input value={url} onChange={(e) => setUrl(e.target.value)} required type="url" data-testid="channel-url" />
          </label>
          <label className="field">
            <span>{t('alerts.secret')}</span>
            <input value={secret} onChange={(e) => setSecret(e.target.value)} type="password" autoComplete="off" data-testid="channel-secret" />
          </label>
          <button type="submit" className="btn btn-primary" disabled={createState.fetching} data-testid="channel-save">
            {t('alerts.create')}
          </button>
        </form>
        {createState.error && <ErrorBox error={createState.error} />}
      </section>
    </>
  );
}
