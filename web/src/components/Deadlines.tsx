// The on-time report (deadlineReport, docs/deadlines.md) over the
// dashboard's range, per type, tenant or schedule, with a CSV download.
import { useEffect, useMemo, useRef, useState } from 'react';
import { gql, useQuery } from 'urql';
import { useI18n, type MessageKey } from '../i18n';
import { downloadCSV, toCSV } from '../lib/csv';
import { ErrorBox } from './ErrorBox';

export const DEADLINE_REPORT = gql`
  query DeadlineReport($from: Time!, $to: Time!, $groupBy: DeadlineReportGroup) {
    deadlineReport(from: $from, to: $to, groupBy: $groupBy) { key total met missed open onTimePercent }
  }
`;

/** One row of the report. */
export interface DeadlineRow {
  key: string;
  total: number;
  met: number;
  missed: number;
  open: number;
  onTimePercent: number | null;
}

export type DeadlineGroup = 'TYPE' | 'TENANT' | 'SCHEDULE';
const GROUPS: DeadlineGroup[] = ['TYPE', 'TENANT', 'SCHEDULE'];
// The server's longest range of the report.
const MAX_MS = 366 * 86_400_000;

/** reportCSV is the report as CSV: a header of the column names, then the rows. */
export function reportCSV(rows: DeadlineRow[], header: string[]): string {
  return toCSV([header, ...rows.map((r) => [r.key, r.total, r.met, r.missed, r.open, r.onTimePercent === null ? '' : Math.round(r.onTimePercent * 10) / 10])]);
}

/** DeadlinesPanel: the report of the tasks whose deadline falls in [from, to). */
export function DeadlinesPanel({ from, to, refreshKey }: { from: string; to: string; refreshKey: number }) {
  const { t } = useI18n();
  const [groupBy, setGroupBy] = useState<DeadlineGroup>('TYPE');
  const tooLong = Date.parse(to) - Date.parse(from) > MAX_MS;
  const variables = useMemo(() => ({ from, to, groupBy }), [from, to, groupBy]);
  const [res, reexecute] = useQuery<{ deadlineReport: DeadlineRow[] }>({ query: DEADLINE_REPORT, variables, pause: tooLong });
  // Tasks moved (the dashboard's throttled events): read it again.
  const first = useRef(refreshKey);
  useEffect(() => {
    if (refreshKey !== first.current && !tooLong) reexecute({ requestPolicy: 'network-only' });
  }, [refreshKey, reexecute, tooLong]);
  const rows = res.data?.deadlineReport ?? [];
  const header = [t(`dl.group.${groupBy}` as MessageKey), t('dl.total'), t('dl.met'), t('dl.missed'), t('dl.open'), t('dl.onTime')];
  const label = (k: string) => (k === '' ? (groupBy === 'SCHEDULE' ? t('dl.noSchedule') : groupBy === 'TENANT' ? t('tenants.defaultTenant') : k) : k);
  const download = () => downloadCSV(`deadlines-${groupBy.toLowerCase()}-${from.slice(0, 16).replace(/:/g, '')}-${to.slice(0, 16).replace(/:/g, '')}.csv`, reportCSV(rows, header));
  return (
    <section className="card" aria-labelledby="deadlines-h" data-testid="deadlines" data-group={groupBy}>
      <div className="section-head">
        <h2 id="deadlines-h">{t('dl.title')}</h2>
        <label className="inline small">
          {t('dl.groupBy')}
          <select value={groupBy} onChange={(e) => setGroupBy(e.target.value as DeadlineGroup)} data-testid="deadlines-group">
            {GROUPS.map((g) => (
              <option key={g} value={g}>
                {t(`dl.group.${g}` as MessageKey)}
              </option>
            ))}
          </select>
        </label>
        <button type="button" className="btn btn-small" onClick={download} disabled={rows.length === 0} data-testid="deadlines-csv">
          {t('dl.csv')}
        </button>
      </div>
      <p className="muted small">{t('dl.intro')}</p>
      {tooLong && <p className="field-error">{t('dl.tooLong')}</p>}
      {res.error && <ErrorBox error={res.error} />}
      {res.data && rows.length === 0 && <p className="muted">{t('dl.none')}</p>}
      {rows.length > 0 && (
        <div className="table-wrap">
          <table className="table" data-testid="deadlines-table">
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
                <tr key={r.key} data-testid="deadline-row" data-key={r.key}>
                  <td className="mono">{label(r.key)}</td>
                  <td className="num">{r.total}</td>
                  <td className="num">{r.met}</td>
                  <td className="num">{r.missed}</td>
                  <td className="num">{r.open}</td>
                  <td className="num">{r.onTimePercent === null ? '—' : `${Math.round(r.onTimePercent * 10) / 10}%`}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
