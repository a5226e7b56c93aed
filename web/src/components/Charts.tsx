// The dashboard's last-hour charts (exact counts of finished tasks per 5
// minutes, from the tasks themselves), drawn by uPlot like every other
// chart of the console (components/Chart.tsx).
import { useMemo } from 'react';
import type { Bucket } from '../lib/buckets';
import { TimeChart, type ChartSeries } from './Chart';

export function ThroughputChart({ buckets, locale, labels }: { buckets: Bucket[]; locale: string; labels: { succeeded: string; failed: string; title: string } }) {
  const xs = useMemo(() => buckets.map((b) => b.start), [buckets]);
  // Stacked: the failed bar stands on the succeeded one (drawn first, to
  // the sum, then covered by the succeeded bar).
  const series = useMemo<ChartSeries[]>(
    () => [
      { label: labels.failed, color: '--danger', bars: true, values: buckets.map((b) => b.succeeded + b.failed) },
      { label: labels.succeeded, color: '--ok', bars: true, values: buckets.map((b) => b.succeeded) },
    ],
    [buckets, labels.failed, labels.succeeded],
  );
  return <TimeChart xs={xs} series={series} title={labels.title} testId="chart-throughput" locale={locale} noLegend />;
}

export function FailureRateChart({ buckets, locale, title }: { buckets: Bucket[]; locale: string; title: string }) {
  const xs = useMemo(() => buckets.map((b) => b.start), [buckets]);
  const series = useMemo<ChartSeries[]>(
    () => [{ label: title, color: '--danger', values: buckets.map((b) => (b.failureRate === null ? null : Math.round(b.failureRate * 1000) / 10)) }],
    [buckets, title],
  );
  return <TimeChart xs={xs} series={series} title={title} testId="chart-failure-rate" locale={locale} yMax={100} yFormat={(v) => `${v}%`} noLegend />;
}
