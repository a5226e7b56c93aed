import { fireEvent, render, screen, waitFor } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { I18nProvider } from '../i18n';
import { csvCell, escapeFormula, toCSV } from '../lib/csv';
import { DeadlinesPanel, reportCSV } from './Deadlines';

describe('CSV cells', () => {
  it('are defused as the server defuses them (formulas, tabs, line breaks, full-width forms)', () => {
    for (const s of ['=1+1', '+1', '-1', '@SUM(A1)', '\tx', '\rx', '\nx', '＝1', '＋1', '－1', '＠x', '  =1', '\u3000=1']) expect(escapeFormula(s)).toBe("'" + s);
    for (const s of ['', 'noop', 'a=b', ' x', '1-2', 'import.contacts']) expect(escapeFormula(s)).toBe(s);
    expect(csvCell(-5)).toBe('-5');
    expect(csvCell('a,"b"')).toBe('"a,""b"""');
    expect(csvCell('=HYPERLINK("x")')).toBe('"\'=HYPERLINK(""x"")"');
    expect(toCSV([['k', 1], [null, '']])).toBe('k,1\r\n,\r\n');
  });
});

describe('DeadlinesPanel', () => {
  const rows = [
    { __typename: 'DeadlineReportRow', key: 'noop', total: 4, met: 2, missed: 1, open: 1, onTimePercent: 66.66666 },
    { __typename: 'DeadlineReportRow', key: '=cmd', total: 1, met: 0, missed: 0, open: 1, onTimePercent: null },
  ];
  it('reads the range per the chosen group, and downloads the rows it shows as CSV', async () => {
    const asked: Record<string, unknown>[] = [];
    const respond = (op: { variables: Record<string, unknown> }) => {
      asked.push(op.variables);
      return fromValue({ operation: op, data: { deadlineReport: rows }, stale: false, hasNext: false });
    };
    const client = { executeQuery: vi.fn(respond), executeMutation: vi.fn(respond), executeSubscription: vi.fn(() => never) } as unknown as Client;
    render(
      <I18nProvider lang="en">
        <Provider value={client}>
          <DeadlinesPanel from="2026-12-02T15:00:00.000Z" to="2026-12-03T15:00:00.000Z" refreshKey={0} />
        </Provider>
      </I18nProvider>,
    );
    await waitFor(() => expect(screen.getAllByTestId('deadline-row')).toHaveLength(2));
    expect(asked.at(-1)).toEqual({ from: '2026-12-02T15:00:00.000Z', to: '2026-12-03T15:00:00.000Z', groupBy: 'TYPE' });
    expect(screen.getAllByTestId('deadline-row')[0].textContent).toBe('noop421166.7%');
    fireEvent.change(screen.getByTestId('deadlines-group'), { target: { value: 'SCHEDULE' } });
    await waitFor(() => expect(asked.at(-1)).toMatchObject({ groupBy: 'SCHEDULE' }));

    const blobs: Blob[] = [];
    URL.createObjectURL = vi.fn((b: Blob) => {
      blobs.push(b);
      return 'blob:x';
    });
    URL.revokeObjectURL = vi.fn();
    const names: string[] = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      names.push(this.download);
    });
    fireEvent.click(screen.getByTestId('deadlines-csv'));
    click.mockRestore();
    expect(names).toEqual(['deadlines-schedule-2026-12-02T1500-2026-12-03T1500.csv']);
    expect(blobs).toHaveLength(1);
    const text = await new Promise<string>((resolve) => {
      const r = new FileReader();
      r.onload = () => resolve(new TextDecoder('utf-8', { ignoreBOM: true }).decode(r.result as ArrayBuffer));
      r.readAsArrayBuffer(blobs[0]);
    });
    expect(text).toBe('\uFEFFSchedule,Total,Met,Missed,Open,On time\r\nnoop,4,2,1,1,66.7\r\n\'=cmd,1,0,0,1,\r\n');
    expect(reportCSV([], ['a'])).toBe('a\r\n');
  });
});
