// External workers: the processes outside the server that run external
// task types over the worker protocol, live (the Nodes page shows them
// below the nodes). Each with who it says it is (language, version), the
// credentials it claims with (tenant, user), its types, the executions it
// holds (linked to their tasks), when it last claimed — and a drain: its
// claims then take nothing and tell it to stop. Admins only.
import { gql } from '@urql/core';
import { useState } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import { hasCode } from '../api/errors';
import { useI18n } from '../i18n';
import { useNow, useOnReconnect } from '../lib/hooks';
import { formatDateTime, relative } from '../lib/time';
import { Link } from '../router';
import { ConfirmDialog } from './ConfirmDialog';
import { ErrorBox } from './ErrorBox';

export type ExternalWorkerState = 'LIVE' | 'DRAINING' | 'GONE';

export interface ExternalWorker {
  id: string;
  name: string;
  tenant: string;
  user: string;
  language: string;
  version: string;
  types: string[];
  node: string;
  state: ExternalWorkerState;
  lastSeenAt: string;
  draining: boolean;
  runningExecutions: { instanceId: string; taskId: string; taskType: string }[];
}

const WORKER = `id name tenant user language version types node state lastSeenAt draining runningExecutions { instanceId taskId taskType }`;

export const EXTERNAL_WORKERS = gql`query ExternalWorkers { externalWorkers { ${WORKER} } }`;
export const EXTERNAL_WORKERS_CHANGED = gql`subscription ExternalWorkersChanged { externalWorkersChanged { ${WORKER} } }`;
export const DRAIN_WORKER = gql`mutation DrainWorker($id: ID!, $drain: Boolean!) { drainWorker(id: $id, drain: $drain) { ${WORKER} } }`;

const CHIP: Record<ExternalWorkerState, string> = {
  LIVE: 'chip-success',
  DRAINING: 'chip-warn',
  GONE: 'chip-failed',
};

export function ExternalWorkers() {
  const { t, locale } = useI18n();
  const now = useNow(1000);
  const [res, reexecute] = useQuery<{ externalWorkers: ExternalWorker[] }>({ query: EXTERNAL_WORKERS });
  const forbidden = hasCode(res.error, 'FORBIDDEN');
  // A server without the worker protocol's registry (an older one) has no
  // such field: the section stays out of the way.
  const unknown = !!res.error?.graphQLErrors.some((e) => e.message.includes('Cannot query field'));
  useOnReconnect(() => reexecute({ requestPolicy: 'network-only' }));
  const [sub] = useSubscription<{ externalWorkersChanged: ExternalWorker[] }>({ query: EXTERNAL_WORKERS_CHANGED, pause: forbidden || unknown || !res.data });
  const [confirm, setConfirm] = useState<ExternalWorker | null>(null);
  const [drainState, drain] = useMutation(DRAIN_WORKER);
  if (forbidden || unknown) return null;
  const workers = sub.data?.externalWorkersChanged ?? res.data?.externalWorkers ?? [];
  return (
    <section className="card" data-testid="workers">
      <h2>{t('workers.title')}</h2>
      <p className="muted">{t('workers.intro')}</p>
      {res.error && <ErrorBox error={res.error} />}
      {drainState.error && <ErrorBox error={drainState.error} />}
      {res.data && workers.length === 0 && <p className="muted">{t('workers.none')}</p>}
      {workers.length > 0 && (
        <div className="table-wrap">
          <table className="table" data-testid="workers-table">
            <thead>
              <tr>
                <th>{t('workers.worker')}</th>
                <th>{t('workers.state')}</th>
                <th>{t('workers.types')}</th>
                <th>{t('workers.running')}</th>
                <th>{t('workers.lastSeen')}</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {workers.map((w) => (
                <tr key={w.id} data-testid="worker" data-worker-name={w.name} data-state={w.state}>
                  <td>
                    <strong>{w.name}</strong>
                    <div className="muted small" data-testid="worker-language">
                      {[w.language, w.version].filter(Boolean).join(' ') || '—'} · {w.user}
                      {w.tenant && ` · ${t('workers.tenant', { tenant: w.tenant })}`} · {t('workers.via', { node: w.node })}
                    </div>
                  </td>
                  <td>
                    <span className={`chip ${CHIP[w.state]}`} data-testid="worker-state">
                      {t(`nodes.state.${w.state}`)}
                    </span>
                  </td>
                  <td className="small" data-testid="worker-types">
                    {w.types.join(', ')}
                  </td>
                  <td data-testid="worker-running">
                    {w.runningExecutions.length === 0
                      ? '—'
                      : w.runningExecutions.map((e) => (
                          <div key={e.instanceId}>
                            <Link to={`/tasks/${e.taskId}`} data-testid="worker-execution">
                              #{e.taskId} {e.taskType}
                            </Link>
                          </div>
                        ))}
                  </td>
                  <td title={formatDateTime(w.lastSeenAt, locale)}>{relative(w.lastSeenAt, now, t)}</td>
                  <td>
                    {w.state !== 'GONE' && (
                      <button type="button" className="btn btn-small" onClick={() => setConfirm(w)} data-testid={w.draining ? 'worker-undrain' : 'worker-drain'}>
                        {w.draining ? t('nodes.undrain') : t('nodes.drain')}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {confirm && (
        <ConfirmDialog
          title={confirm.draining ? t('workers.undrainTitle', { worker: confirm.name }) : t('workers.drainTitle', { worker: confirm.name })}
          confirmLabel={confirm.draining ? t('nodes.undrain') : t('nodes.drain')}
          cancelLabel={t('nodes.cancel')}
          danger={!confirm.draining}
          busy={drainState.fetching}
          onClose={() => setConfirm(null)}
          onConfirm={() => {
            const w = confirm;
            void drain({ id: w.id, drain: !w.draining }).then(() => setConfirm(null));
          }}
          testId="worker-confirm"
        >
          <p>{confirm.draining ? t('workers.undrainBody') : t('workers.drainBody')}</p>
        </ConfirmDialog>
      )}
    </section>
  );
}
