// Nodes: the processes sharing the database, live. Admins see each node —
// its state (LIVE, DRAINING, GONE after its lease, STOPPED), whether it
// leads the watchdog, its workers' load, its build, where its files live,
// its running executions (linked to their tasks) — and drain or undrain
// it. Other users see counts only.
import { gql } from '@urql/core';
import { useState } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import { hasCode } from '../api/errors';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { ErrorBox } from '../components/ErrorBox';
import { useI18n } from '../i18n';
import { useOnReconnect } from '../lib/hooks';
import { Link } from '../router';
import { RelativeTime } from '../components/RelativeTime';

export type ClusterNodeState = 'LIVE' | 'DRAINING' | 'GONE' | 'STOPPED';

export interface ClusterNode {
  id: string;
  state: ClusterNodeState;
  host: string;
  pid: number;
  version: string;
  roles: string[];
  startedAt: string;
  lastSeenAt: string;
  stoppedAt: string | null;
  busy: number;
  total: number;
  leading: boolean;
  files: string;
  draining: boolean;
  runningExecutions: { instanceId: string; taskId: string; taskType: string }[];
  // The database's clock minus the node's wall clock at its last refresh.
  clockOffsetMs: number;
  clockSkewed: boolean;
}

export interface ClusterSummary {
  live: number;
  draining: number;
  gone: number;
  stopped: number;
  busy: number;
  total: number;
}

const NODE = `id state host pid version roles startedAt lastSeenAt stoppedAt busy total leading files draining clockOffsetMs clockSkewed runningExecutions { instanceId taskId taskType }`;
const SUMMARY = `live draining gone stopped busy total`;

export const CLUSTER_NODES = gql`query ClusterNodes { clusterNodes { ${NODE} } }`;
export const CLUSTER_NODES_CHANGED = gql`subscription ClusterNodesChanged { clusterNodesChanged { ${NODE} } }`;
export const CLUSTER_SUMMARY = gql`query ClusterSummary { clusterSummary { ${SUMMARY} } }`;
export const CLUSTER_SUMMARY_CHANGED = gql`subscription ClusterSummaryChanged { clusterSummaryChanged { ${SUMMARY} } }`;
export const DRAIN_NODE = gql`mutation DrainClusterNode($id: String!, $drain: Boolean!) { drainClusterNode(id: $id, drain: $drain) { ${NODE} } }`;

const CHIP: Record<ClusterNodeState, string> = {
  LIVE: 'chip-success',
  DRAINING: 'chip-warn',
  GONE: 'chip-failed',
  STOPPED: 'chip-cancelled',
};

export function Nodes() {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ clusterNodes: ClusterNode[] }>({ query: CLUSTER_NODES });
  const forbidden = hasCode(res.error, 'FORBIDDEN');
  useOnReconnect(() => reexecute({ requestPolicy: 'network-only' }));
  // Live: the server sends the whole list whenever a node changes.
  const [sub] = useSubscription<{ clusterNodesChanged: ClusterNode[] }>({ query: CLUSTER_NODES_CHANGED, pause: forbidden || !res.data });
  const nodes = sub.data?.clusterNodesChanged ?? res.data?.clusterNodes ?? [];
  return (
    <div className="page" data-testid="page-nodes">
      <h1>{t('nodes.title')}</h1>
      <p className="muted">{t('nodes.intro')}</p>
      {forbidden ? (
        <Summary />
      ) : (
        <>
          {res.error && <ErrorBox error={res.error} />}
          {res.data && nodes.length === 0 && <p className="muted">{t('nodes.none')}</p>}
          {nodes.length > 0 && <NodeTable nodes={nodes} />}
        </>
      )}
    </div>
  );
}

function Summary() {
  const { t } = useI18n();
  const [res] = useQuery<{ clusterSummary: ClusterSummary }>({ query: CLUSTER_SUMMARY });
  const [sub] = useSubscription<{ clusterSummaryChanged: ClusterSummary }>({ query: CLUSTER_SUMMARY_CHANGED });
  const s = sub.data?.clusterSummaryChanged ?? res.data?.clusterSummary;
  return (
    <section className="card" data-testid="nodes-summary">
      <p className="muted">{t('nodes.countsOnly')}</p>
      {res.error && <ErrorBox error={res.error} />}
      {s && (
        <p data-testid="nodes-counts">
          {t('nodes.counts', { live: s.live, draining: s.draining, gone: s.gone, stopped: s.stopped, busy: s.busy, total: s.total })}
        </p>
      )}
    </section>
  );
}

function NodeTable({ nodes }: { nodes: ClusterNode[] }) {
  const { t } = useI18n();
  const [confirm, setConfirm] = useState<ClusterNode | null>(null);
  const [drainState, drain] = useMutation(DRAIN_NODE);
  return (
    <>
      {drainState.error && <ErrorBox error={drainState.error} />}
      <div className="table-wrap">
        <table className="table" data-testid="nodes-table">
          <thead>
            <tr>
              <th>{t('nodes.node')}</th>
              <th>{t('nodes.state')}</th>
              <th>{t('nodes.workers')}</th>
              <th>{t('nodes.running')}</th>
              <th>{t('nodes.build')}</th>
              <th>{t('nodes.files')}</th>
              <th>{t('nodes.clock')}</th>
              <th>{t('nodes.lastSeen')}</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {nodes.map((n) => (
              <tr key={n.id} data-testid="node" data-node-id={n.id} data-state={n.state}>
                <td>
                  <strong>{n.id}</strong>
                  <div className="muted small">
                    {n.host} · pid {n.pid} · {n.roles.join(', ')}
                  </div>
                  {n.leading && (
                    <span className="chip" data-testid="node-leading">
                      {t('nodes.leading')}
                    </span>
                  )}
                </td>
                <td>
                  <span className={`chip ${CHIP[n.state]}`} data-testid="node-state">
                    {t(`nodes.state.${n.state}`)}
                  </span>
                </td>
                <td data-testid="node-load">
                  {n.total > 0 ? t('nodes.load', { busy: n.busy, total: n.total }) : '—'}
                </td>
                <td data-testid="node-running">
                  {n.runningExecutions.length === 0
                    ? '—'
                    : n.runningExecutions.map((e) => (
                        <div key={e.instanceId}>
                          <Link to={`/tasks/${e.taskId}`} data-testid="node-execution">
                            #{e.taskId} {e.taskType}
                          </Link>
                        </div>
                      ))}
                </td>
                <td className="small">{n.version}</td>
                <td className="small" data-testid="node-files">
                  {n.files}
                </td>
                <td data-testid="node-clock" data-offset-ms={n.clockOffsetMs} data-skewed={n.clockSkewed}>
                  <ClockOffset node={n} />
                </td>
                <td>
                  <RelativeTime at={n.lastSeenAt} />
                </td>
                <td>
                  {(n.state === 'LIVE' || n.state === 'DRAINING') && (
                    <button type="button" className="btn btn-small" onClick={() => setConfirm(n)} data-testid={n.draining ? 'node-undrain' : 'node-drain'}>
                      {n.draining ? t('nodes.undrain') : t('nodes.drain')}
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {confirm && (
        <ConfirmDialog
          title={confirm.draining ? t('nodes.undrainTitle', { node: confirm.id }) : t('nodes.drainTitle', { node: confirm.id })}
          confirmLabel={confirm.draining ? t('nodes.undrain') : t('nodes.drain')}
          cancelLabel={t('nodes.cancel')}
          danger={!confirm.draining}
          busy={drainState.fetching}
          onClose={() => setConfirm(null)}
          onConfirm={() => {
            const n = confirm;
            void drain({ id: n.id, drain: !n.draining }).then(() => setConfirm(null));
          }}
          testId="node-confirm"
        >
          <p>{confirm.draining ? t('nodes.undrainBody') : t('nodes.drainBody')}</p>
        </ConfirmDialog>
      )}
    </>
  );
}

// formatOffset: a span of the clock, "120.0 s", "300 ms".
export function formatOffset(ms: number): string {
  const a = Math.abs(ms);
  return a < 1000 ? `${a} ms` : `${(a / 1000).toFixed(1)} s`;
}

// ClockOffset: how far the node's wall clock is from the database's (the
// API's offset is the database's minus the node's: a node ahead has a
// negative one), and a warning when that is past the node's threshold.
function ClockOffset({ node }: { node: ClusterNode }) {
  const { t } = useI18n();
  const offset = formatOffset(node.clockOffsetMs);
  return (
    <>
      <span className="small" data-testid="node-clock-offset">
        {node.clockOffsetMs <= 0 ? t('nodes.clockAhead', { offset }) : t('nodes.clockBehind', { offset })}
      </span>
      {node.clockSkewed && (
        <div>
          <span className="chip chip-warn" data-testid="node-clock-skewed" title={t('nodes.clockSkewedTitle')}>
            ⚠ {t('nodes.clockSkewed')}
          </span>
        </div>
      )}
    </>
  );
}
