import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import type { ReactNode } from 'react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { I18nProvider } from '../i18n';
import { rangeWindow, resolutionFor, type HistoryPoint } from '../lib/history';
import { TimeChart, type ChartSeries } from './Chart';
import { HistoryPanel, RangePicker, type RangeChoice } from './History';

// uPlot draws on a canvas, which jsdom has not: the charts are checked by
// what they hand to it.
const plots = vi.hoisted(() => [] as { opts: { series: { label?: string }[] }; data: unknown[][]; el: HTMLElement; destroyed: boolean }[]);
vi.mock('uplot', () => {
  class FakePlot {
    static paths = { bars: () => () => null };
    opts: { series: { label?: string }[] };
    data: unknown[][];
    el: HTMLElement;
    destroyed = false;
    constructor(opts: { series: { label?: string }[] }, data: unknown[][], el: HTMLElement) {
      this.opts = opts;
      this.data = data;
      this.el = el;
      plots.push(this);
    }
    setData(d: unknown[][]) {
      this.data = d;
    }
    setSize() {}
    destroy() {
      this.destroyed = true;
    }
  }
  return { default: FakePlot };
});

const H = 3_600_000;
const NOW = Date.parse('2026-12-03T14:37:20Z');

describe('rangeWindow', () => {
  it('ends a preset with the bucket that holds now, and picks its resolution', () => {
    expect(rangeWindow('1h', NOW)).toEqual({ from: '2026-12-03T13:38:00.000Z', to: '2026-12-03T14:38:00.000Z', resolution: 'MINUTE' });
    expect(rangeWindow('24h', NOW)).toEqual({ from: '2026-12-02T15:00:00.000Z', to: '2026-12-03T15:00:00.000Z', resolution: 'HOUR' });
    expect(rangeWindow('7d', NOW)).toEqual({ from: '2026-11-26T15:00:00.000Z', to: '2026-12-03T15:00:00.000Z', resolution: 'HOUR' });
    expect(rangeWindow('30d', NOW)).toEqual({ from: '2026-11-04T00:00:00.000Z', to: '2026-12-04T00:00:00.000Z', resolution: 'DAY' });
  });
  it('widens a custom range to whole buckets, as the server picks them', () => {
    expect(rangeWindow('custom', NOW, { from: '2026-12-03T10:15:30Z', to: '2026-12-03T12:00:10Z' })).toEqual({
      from: '2026-12-03T10:15:00.000Z',
      to: '2026-12-03T12:01:00.000Z',
      resolution: 'MINUTE',
    });
    expect(rangeWindow('custom', NOW, { from: '2026-12-01T10:15:00Z', to: '2026-12-03T12:00:00Z' })).toMatchObject({ resolution: 'HOUR', from: '2026-12-01T10:00:00.000Z' });
    expect(resolutionFor(6 * H)).toBe('MINUTE');
    expect(resolutionFor(6 * H + 1)).toBe('HOUR');
    expect(resolutionFor(14 * 24 * H + 1)).toBe('DAY');
  });
  it('refuses a custom range without both ends, backwards, or beyond 1,500 buckets', () => {
    expect(rangeWindow('custom', NOW, { from: null, to: '2026-12-03T12:00:00Z' })).toEqual({ problem: 'missing' });
    expect(rangeWindow('custom', NOW, { from: '2026-12-03T12:00:00Z', to: '2026-12-03T12:00:00Z' })).toEqual({ problem: 'order' });
    expect(rangeWindow('custom', NOW, { from: '2020-01-01T00:00:00Z', to: '2026-01-01T00:00:00Z' })).toEqual({ problem: 'tooLong' });
  });
});

describe('RangePicker', () => {
  it('switches presets, and shows from/to for a custom range', () => {
    const changes: RangeChoice[] = [];
    const { rerender } = render(
      <I18nProvider lang="en">
        <RangePicker value={{ id: '1h', from: null, to: null }} onChange={(v) => changes.push(v)} />
      </I18nProvider>,
    );
    expect(screen.getByTestId('range-1h').getAttribute('aria-pressed')).toBe('true');
    expect(screen.queryByTestId('range-from')).toBeNull();
    fireEvent.click(screen.getByTestId('range-7d'));
    expect(changes.at(-1)).toMatchObject({ id: '7d' });
    fireEvent.click(screen.getByTestId('range-custom'));
    const custom = changes.at(-1)!;
    expect(custom.id).toBe('custom');
    expect(Date.parse(custom.to!) - Date.parse(custom.from!)).toBe(24 * H);
    rerender(
      <I18nProvider lang="en">
        <RangePicker value={custom} onChange={(v) => changes.push(v)} />
      </I18nProvider>,
    );
    expect(screen.getByTestId('range-from')).toBeTruthy();
    fireEvent.change(screen.getByTestId('range-from'), { target: { value: '2026-12-01T08:30' } });
    expect(changes.at(-1)!.from).toBe(new Date('2026-12-01T08:30').toISOString());
  });
});

function point(start: number, p: Partial<HistoryPoint>): HistoryPoint {
  return { start: new Date(start).toISOString(), created: 0, started: 0, succeeded: 0, failed: 0, cancelled: 0, retries: 0, waiting: 0, waitP50Ms: null, waitP95Ms: null, runP50Ms: null, runP95Ms: null, ...p };
}

function historyClient() {
  const asked: Record<string, unknown>[] = [];
  const execute = vi.fn((op: { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> }) => {
    if (op.query.definitions[0]?.name?.value !== 'TaskHistory') return fromValue({ operation: op, data: { deadlineReport: [] }, stale: false, hasNext: false });
    asked.push(op.variables);
    const from = Date.parse(String(op.variables.from));
    // Type "b" has other counts than every type together.
    const k = op.variables.type === 'b' ? 1 : 3;
    const data = { taskHistory: [point(from, { succeeded: 2 * k, failed: k, created: 4 * k, started: 3 * k, runP50Ms: 120 }), point(from + 60_000, { succeeded: k, cancelled: 1 })] };
    return fromValue({ operation: op, data, stale: false, hasNext: false });
  });
  const client = { executeQuery: execute, executeMutation: execute, executeSubscription: vi.fn(() => never) } as unknown as Client;
  return { client, asked };
}

function wrap(ui: ReactNode, client: Client) {
  return render(
    <I18nProvider lang="en">
      <Provider value={client}>{ui}</Provider>
    </I18nProvider>,
  );
}

const plotOf = (testId: string) => plots.filter((p) => p.el.dataset.testid === testId && !p.destroyed).at(-1)!;

describe('HistoryPanel', () => {
  it('reads the range and type chosen, and hands each chart its series', async () => {
    const { client, asked } = historyClient();
    wrap(<HistoryPanel types={['a', 'b']} refreshKey={0} />, client);
    await waitFor(() => expect(plotOf('hist-throughput')).toBeTruthy());
    expect(asked.at(-1)).toMatchObject({ resolution: 'MINUTE', type: null });
    expect(Date.parse(String(asked.at(-1)!.to)) - Date.parse(String(asked.at(-1)!.from))).toBe(H);

    const tp = plotOf('hist-throughput');
    expect(tp.opts.series.slice(1).map((s) => s.label)).toEqual(['Succeeded', 'Failed', 'Cancelled']);
    await waitFor(() => expect(plotOf('hist-throughput').data.slice(1)).toEqual([[6, 3], [3, 0], [0, 1]]));
    const xs = plotOf('hist-throughput').data[0] as number[];
    expect(xs[1] - xs[0]).toBe(60);
    expect(plotOf('hist-flow').data.slice(1)).toEqual([[12, 0], [9, 0]]);
    expect(plotOf('hist-run').data[1]).toEqual([120, null]);
    expect(screen.getByTestId('hist-totals').dataset.succeeded).toBe('9');
    expect(screen.getByTestId('hist-throughput').dataset.total).toBe('13');

    fireEvent.click(screen.getByTestId('range-24h'));
    await waitFor(() => expect(asked.at(-1)).toMatchObject({ resolution: 'HOUR' }));
    expect(Date.parse(String(asked.at(-1)!.to)) - Date.parse(String(asked.at(-1)!.from))).toBe(24 * H);
    expect(screen.getByTestId('history').dataset.resolution).toBe('HOUR');

    fireEvent.change(screen.getByTestId('history-type'), { target: { value: 'b' } });
    await waitFor(() => expect(asked.at(-1)).toMatchObject({ type: 'b', resolution: 'HOUR' }));
    await waitFor(() => expect(plotOf('hist-throughput').data.slice(1)).toEqual([[2, 1], [1, 0], [0, 1]]));
    expect(screen.getByTestId('hist-totals').dataset.succeeded).toBe('3');
  });

  it('says what is wrong with a custom range, and reads nothing for it', async () => {
    const { client, asked } = historyClient();
    wrap(<HistoryPanel types={[]} refreshKey={0} />, client);
    await waitFor(() => expect(asked.length).toBeGreaterThan(0));
    fireEvent.click(screen.getByTestId('range-custom'));
    const n = asked.length;
    await act(async () => {
      fireEvent.change(screen.getByTestId('range-to'), { target: { value: '2000-01-01T00:00' } });
    });
    expect(screen.getByTestId('range-problem').textContent).toBe('The end must come after the start.');
    expect(asked.length).toBe(n);
  });
});

describe('TimeChart', () => {
  const xs = [0, 60_000, 120_000];
  const draw = (series: ChartSeries[], lang: 'en' | 'zh' = 'en') => (
    <I18nProvider lang={lang}>
      <TimeChart xs={xs} series={series} title="t" testId="tc" locale="en" />
    </I18nProvider>
  );
  it('hands uPlot its series, sets new values on the same chart, and makes a new one for new series', () => {
    const { rerender } = render(draw([{ label: 'a', color: '#112233', values: [1, null, 3] }]));
    const first = plotOf('tc');
    expect(first.data).toEqual([[0, 60, 120], [1, null, 3]]);
    expect(first.opts.series.map((s) => s.label)).toEqual(['Time', 'a']);
    expect(screen.getByTestId('tc').dataset).toMatchObject({ points: '3', total: '4', colors: '#112233' });
    rerender(draw([{ label: 'a', color: '#112233', values: [2, 2, 2] }]));
    expect(plotOf('tc')).toBe(first);
    expect(first.data).toEqual([[0, 60, 120], [2, 2, 2]]);
    rerender(draw([{ label: 'a', color: '#112233', values: [2, 2, 2] }, { label: 'b', color: '#445566', values: [0, 0, 1] }]));
    expect(first.destroyed).toBe(true);
    expect(plotOf('tc').opts.series.map((s) => s.label)).toEqual(['Time', 'a', 'b']);
  });
  it("labels the time in the viewer's language", () => {
    render(draw([{ label: 'a', color: '#112233', values: [1, 2, 3] }], 'zh'));
    expect(plotOf('tc').opts.series[0].label).toBe('时间');
  });
});
