import { render, screen } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { fromValue, never } from 'wonka';
import { describe, expect, it, vi } from 'vitest';
import { I18nProvider } from '../i18n';
import { CostPanel, bytes, costCSV, runTime, type CostRow } from './Cost';

const row = (key: string, runTimeMs: number): CostRow => ({ key, executions: 4, succeeded: 3, failed: 1, cancelled: 0, retries: 1, created: 5, runTimeMs, runP95Ms: 512, rowsImported: 120, rowsExported: 7, bytesStored: 3_145_728 });

describe('cost report', () => {
  it('says run times in seconds, minutes or hours', () => {
    expect(runTime(1500)).toBe('1.5 s');
    expect(runTime(90_000)).toBe('1.5 min');
    expect(runTime(5_400_000)).toBe('1.5 h');
  });

  it('says bytes in B, KiB, MiB or GiB', () => {
    expect(bytes(0)).toBe('0 B');
    expect(bytes(1023)).toBe('1023 B');
    expect(bytes(1536)).toBe('1.5 KiB');
    expect(bytes(3_145_728)).toBe('3.0 MiB');
    expect(bytes(5 * 1024 ** 3)).toBe('5.0 GiB');
  });

  it('exports its rows as CSV, a formula neutralised', () => {
    const csv = costCSV([row('=HYPERLINK("x")', 2500)], ['Type', 'Executions', 'Succeeded', 'Failed', 'Cancelled', 'Retries', 'Created', 'Run time', 'Run p95', 'Rows imported', 'Rows exported', 'Bytes stored']);
    const lines = csv.trim().split(/\r?\n/);
    expect(lines).toHaveLength(2);
    expect(lines[1].startsWith(`"'=HYPERLINK`) || lines[1].startsWith(`'=HYPERLINK`)).toBe(true);
    expect(lines[1]).toContain(',4,3,1,0,1,5,2.5,512,120,7,3145728');
    expect(lines[0]).toBe('Type,Executions,Succeeded,Failed,Cancelled,Retries,Created,Run time,Run p95,Rows imported,Rows exported,Bytes stored');
  });

  it("shows each type's row from taskCost", async () => {
    const client = {
      executeQuery: vi.fn((op: unknown) => fromValue({ operation: op, stale: false, hasNext: false, data: { taskCost: [row('import', 90_000), row('noop', 100)] } })),
      executeMutation: vi.fn(() => never),
      executeSubscription: vi.fn(() => never),
    } as unknown as Client;
    render(
      <I18nProvider lang="en">
        <Provider value={client}>
          <CostPanel from="2026-12-03T00:00:00Z" to="2026-12-03T01:00:00Z" refreshKey={0} />
        </Provider>
      </I18nProvider>,
    );
    const rows = await screen.findAllByTestId('cost-row');
    expect(rows.map((r) => r.dataset.key)).toEqual(['import', 'noop']);
    expect(rows[0].textContent).toContain('1.5 min');
    // Rows imported and exported, and bytes stored, in their own columns.
    const headers = screen.getAllByRole('columnheader').map((h) => h.textContent);
    expect(headers.slice(-3)).toEqual(['Rows imported', 'Rows exported', 'Bytes stored']);
    const cells = [...rows[0].querySelectorAll('td')].map((td) => td.textContent);
    expect(cells.slice(-3)).toEqual(['120', '7', '3.0 MiB']);
    expect(rows[0].dataset.bytesStored).toBe('3145728');
  });
});
