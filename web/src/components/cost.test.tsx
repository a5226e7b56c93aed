import { render, screen } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { fromValue, never } from 'wonka';
import { describe, expect, it, vi } from 'vitest';
import { I18nProvider } from '../i18n';
import { CostPanel, costCSV, runTime, type CostRow } from './Cost';

const row = (key: string, runTimeMs: number): CostRow => ({ key, executions: 4, succeeded: 3, failed: 1, cancelled: 0, retries: 1, created: 5, runTimeMs, runP95Ms: 512 });

describe('cost report', () => {
  it('says run times in seconds, minutes or hours', () => {
    expect(runTime(1500)).toBe('1.5 s');
    expect(runTime(90_000)).toBe('1.5 min');
    expect(runTime(5_400_000)).toBe('1.5 h');
  });

  it('exports its rows as CSV, a formula neutralised', () => {
    const csv = costCSV([row('=HYPERLINK("x")', 2500)], ['Type', 'Executions', 'Succeeded', 'Failed', 'Cancelled', 'Retries', 'Created', 'Run time', 'Run p95']);
    const lines = csv.trim().split(/\r?\n/);
    expect(lines).toHaveLength(2);
    expect(lines[1].startsWith(`"'=HYPERLINK`) || lines[1].startsWith(`'=HYPERLINK`)).toBe(true);
    expect(lines[1]).toContain(',4,3,1,0,1,5,2.5,512');
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
  });
});
