// TimeChart: a time series drawn by uPlot (https://github.com/leeoniya/uPlot),
// a small canvas charting library: axes that pick their own ticks, a cursor
// with the values of the bucket under it, resizing with its card. The
// dashboard's charts and the types' sparklines are all drawn by it.
import { useEffect, useMemo, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useI18n } from '../i18n';

/** One line (or set of bars) of a chart. */
export interface ChartSeries {
  label: string;
  /** A CSS custom property of the theme (`--ok`) or a colour. */
  color: string;
  /** One value per x; null where there is none (a gap). */
  values: (number | null)[];
  /** Bars instead of a line. */
  bars?: boolean;
}

/** What a TimeChart draws. */
export interface TimeChartProps {
  /** The buckets' starts, in milliseconds. */
  xs: number[];
  series: ChartSeries[];
  /** The accessible name, and the chart's title. */
  title: string;
  testId: string;
  locale: string;
  height?: number;
  /** A tick label of the y axis. */
  yFormat?: (v: number) => string;
  /** A fixed top of the y axis (100 for a percentage). */
  yMax?: number;
  /** A sparkline: no axes, no legend, no cursor. */
  sparkline?: boolean;
  /** No legend under the chart (the page draws its own). */
  noLegend?: boolean;
}

// resolveColor reads a theme property (charts draw on a canvas, which
// knows no CSS variables).
export function resolveColor(c: string): string {
  if (!c.startsWith('--') || typeof getComputedStyle === 'undefined') return c;
  return getComputedStyle(document.documentElement).getPropertyValue(c).trim() || '#888';
}

// timeTicks labels the x axis in the viewer's zone: times of day under a
// day's step, dates beyond.
function timeTicks(locale: string) {
  const clock = new Intl.DateTimeFormat(locale, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  const date = new Intl.DateTimeFormat(locale, { month: '2-digit', day: '2-digit' });
  return (_u: uPlot, splits: number[], _axis: number, _space: number, incr: number) =>
    splits.map((s) => (incr >= 86_400 ? date : clock).format(new Date(s * 1000)));
}

/** The sum of every value a chart draws (0 when it draws nothing). */
export function seriesTotal(series: ChartSeries[]): number {
  return series.reduce((n, s) => n + s.values.reduce<number>((m, v) => m + (v ?? 0), 0), 0);
}

function options(p: TimeChartProps, width: number, timeLabel: string): uPlot.Options {
  const height = p.height ?? (p.sparkline ? 36 : 200);
  const zone = new Intl.DateTimeFormat(p.locale, { timeZoneName: 'short' }).formatToParts(new Date()).find((x) => x.type === 'timeZoneName')?.value ?? '';
  const axisStroke = resolveColor('--muted');
  const grid = { stroke: resolveColor('--border'), width: 1 };
  return {
    width,
    height,
    title: undefined,
    legend: { show: !p.sparkline && !p.noLegend },
    cursor: p.sparkline ? { show: false } : { drag: { x: false, y: false } },
    scales: {
      // Bars stand right of their bucket's start: the last one needs its
      // bucket's width.
      x: {
        time: true,
        range: (_u, min, max) => {
          const step = p.xs.length > 1 ? (p.xs[1] - p.xs[0]) / 1000 : 60;
          return [min, p.series.some((s) => s.bars) ? max + step : max];
        },
      },
      y: { range: (_u, _min, max) => [0, p.yMax ?? Math.max(4, max * 1.1)] },
    },
    axes: p.sparkline
      ? [{ show: false }, { show: false }]
      : [
          { stroke: axisStroke, grid, ticks: grid, values: timeTicks(p.locale), label: zone, labelSize: 18, labelFont: '11px system-ui', font: '11px system-ui' },
          { stroke: axisStroke, grid, ticks: grid, font: '11px system-ui', size: 48, values: (_u, splits) => splits.map((v) => (p.yFormat ? p.yFormat(v) : String(v))) },
        ],
    series: [
      { label: timeLabel, value: (_u, v) => (v == null ? '—' : new Intl.DateTimeFormat(p.locale, { dateStyle: 'short', timeStyle: 'short' }).format(new Date(v * 1000))) },
      ...p.series.map((s) => {
        const color = resolveColor(s.color);
        return {
          label: s.label,
          stroke: color,
          width: s.bars ? 0 : p.sparkline ? 1.5 : 2,
          fill: s.bars ? color : undefined,
          points: { show: !p.sparkline && !s.bars && p.xs.length <= 60 },
          paths: s.bars ? uPlot.paths.bars!({ size: [0.7, 40], align: 1 }) : undefined,
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v == null ? '—' : p.yFormat ? p.yFormat(v) : String(v)),
        } satisfies uPlot.Series;
      }),
    ],
  };
}

/** A time series chart (uPlot), sized to its container's width. */
export function TimeChart(p: TimeChartProps) {
  const { t } = useI18n();
  const timeLabel = t('chart.time');
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const latest = useRef(p);
  latest.current = p;
  const data = useMemo<uPlot.AlignedData>(() => [p.xs.map((x) => x / 1000), ...p.series.map((s) => s.values)], [p.xs, p.series]);
  const dataRef = useRef(data);
  dataRef.current = data;
  // A new chart when what it draws changes shape; new data is only set.
  const shape = JSON.stringify([p.series.map((s) => [s.label, s.color, !!s.bars]), p.sparkline, p.noLegend, p.locale, p.height, p.yMax, p.xs.length <= 60]);
  useEffect(() => {
    const node = el.current;
    if (!node) return;
    const width = () => Math.max(120, node.clientWidth || 600);
    const u = new uPlot(options(latest.current, width(), timeLabel), dataRef.current, node);
    plot.current = u;
    let ro: ResizeObserver | undefined;
    if (typeof ResizeObserver !== 'undefined') {
      ro = new ResizeObserver(() => u.setSize({ width: width(), height: latest.current.height ?? (latest.current.sparkline ? 36 : 200) }));
      ro.observe(node);
    }
    return () => {
      ro?.disconnect();
      u.destroy();
      plot.current = null;
    };
  }, [shape, timeLabel]);
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return (
    <div
      ref={el}
      className={p.sparkline ? 'sparkline' : 'uchart'}
      role="img"
      aria-label={p.title}
      data-testid={p.testId}
      data-points={p.xs.length}
      data-total={seriesTotal(p.series)}
      data-colors={p.series.map((s) => resolveColor(s.color)).join(',')}
    />
  );
}
