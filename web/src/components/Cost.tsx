// What each task type or tenant cost over the dashboard's range (taskCost,
// docs/history.md#cost): executions, outcomes, retries, run time, rows
// imported and exported, bytes stored, with a CSV download.
import { useEffect, useMemo, useRef, useState } from 'react';
import { gql, useQuery } from 'urql';
import { useI18n, type MessageKey } from '../i18n';
import { downloadCSV, toCSV } from '../lib/csv';
import { ErrorBox } from './ErrorBox';

export const TASK_COST = gql`
  query TaskCost($from: Time!, $to: Time!, $groupBy: CostGroup) {
    taskCost(from: $from, to: $to, groupBy: $groupBy) { key executions succeeded failed cancelled retries created runTimeMs runP95Ms rowsImported rowsExported bytesStored }
  }
`;

/** One row of the cost report. */
export interface CostRow {
  key: string;
  executions: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  retries: number;
  created: number;
  runTimeMs: number;
  runP95Ms: number | null;
  rowsImported: number;
  rowsExported: number;
  bytesStored: number;
}

export type CostGroup = 'TYPE' | 'TENANT';
const GROUPS: CostGroup[] = ['TYPE', 'TENANT'];

/** runTime is a run time in milliseconds as seconds, minutes or hours. */
export function runTime(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 100) / 10} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 6_000) / 10} min`;
  return `${Math.round(ms / 360_000) / 10} h`;
}

/** bytes is a number of bytes in B, KiB, MiB, GiB or TiB. */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

/** costCSV is the report as CSV: a header, then the rows (run time in seconds, bytes stored in bytes). */
export function costCSV(rows: CostRow[], header: string[]): string {
  return toCSV([
    header,
    ...rows.map((r) => [r.key, r.executions, r.succeeded, r.failed, r.cancelled, r.retries, r.created, Math.round(r.runTimeMs) / 1000, r.runP95Ms ?? '', r.rowsImported, r.rowsExported, r.bytesStored]),
  ]);
}

/** CostPanel: what each type (or tenant) cost in [from, to). */
export function CostPanel({ from, to, refreshKey }: { from: string; to: string; refreshKey: number }) {
  const { t } = useI18n();
  const [groupBy, setGroupBy] = useState<CostGroup>('TYPE');
  const variables = useMemo(() => ({ from, to, groupBy }), [from, to, groupBy]);
  const [res, reexecute] = useQuery<{ taskCost: CostRow[] }>({ query: TASK_COST, variables });
  const first = useRef(refreshKey);
  useEffect(() => {
    if (refreshKey !== first.current) reexecute({ requestPolicy: 'network-only' });
  }, [refreshKey, reexecute]);
  const rows = res.data?.taskCost ?? [];
  const header = [
    t(`cost.group.${groupBy}` as MessageKey),
    t('cost.executions'),
    t('cost.succeeded'),
    t('cost.failed'),
    t('cost.cancelled'),
    t('cost.retries'),
    t('cost.created'),
    t('cost.runTime'),
    t('cost.runP95'),
    t('cost.rowsImported'),
    t('cost.rowsExported'),
    t('cost.bytesStored'),
  ];
  const label = (k: string) => (k === '' && groupBy === 'TENANT' ? t('tenants.defaultTenant') : k);
  const download = () => downloadCSV(`cost-${groupBy.toLowerCase()}-${from.slice(0, 16).replace(/:/g, '')}-${to.slice(0, 16).replace(/:/g, '')}.csv`, costCSV(rows, header));
  return (
    <section className="card" aria-labelledby="cost-h" data-testid="cost" data-group={groupBy}>
      <div className="section-head">
        <h2 id="cost-h">{t('cost.title')}</h2>
        <label className="inline small">
          {t('dl.groupBy')}
          <select value={groupBy} onChange={(e) => setGroupBy(e.target.value as CostGroup)} data-testid="cost-group">
            {GROUPS.map((g) => (
              <option key={g} value={g}>
                {t(`cost.group.${g}` as MessageKey)}
              </option>
            ))}
          </select>
        </label>
        <button type="button" className="btn btn-small" onClick={download} disabled={rows.length === 0} data-testid="cost-csv">
          {t('dl.csv')}
        </button>
      </div>
      <p className="muted small">{t('cost.intro')}</p>
      {res.error && <ErrorBox error={res.error} />}
      {res.data && rows.length === 0 && <p className="muted">{t('cost.none')}</p>}
      {rows.length > 0 && (
        <div className="table-wrap">
          <table className="table" data-testid="cost-table">
            <thead>
              <tr>
                {header.map((h, i) => (
                  <th key={h} className={i > 0 ? 'num' : undefined}>
                    {h}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.key} data-testid="cost-row" data-key={r.key} data-executions={r.executions} data-rows-imported={r.rowsImported} data-rows-exported={r.rowsExported} data-bytes-stored={r.bytesStored}>
                  <td className="mono">{label(r.key)}</td>
                  <td className="num">{r.executions}</td>
                  <td className="num">{r.succeeded}</td>
                  <td className="num">{r.failed}</td>
                  <td className="num">{r.cancelled}</td>
                  <td className="num">{r.retries}</td>
                  <td className="num">{r.created}</td>
                  <td className="num">{runTime(r.runTimeMs)}</td>
                  <td className="num">{r.runP95Ms === null ? '—' : `≤ ${runTime(r.runP95Ms)}`}</td>
                  <td className="num">{r.rowsImported}</td>
                  <td className="num">{r.rowsExported}</td>
                  <td className="num" title={`${r.bytesStored} B`}>
                    {bytes(r.bytesStored)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
