// Hand-drawn SVG charts: two small charts do not justify a charting library
// in the bundle.
import type { Bucket } from '../lib/buckets';
import { formatClock } from '../lib/time';

const W = 600;
const H = 200;
const PAD = { l: 40, r: 10, t: 10, b: 24 };

// In the viewer's zone, named.
const timeLabel = formatClock;

function niceMax(v: number): number {
  if (v <= 4) return 4;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function ThroughputChart({ buckets, locale, labels }: { buckets: Bucket[]; locale: string; labels: { succeeded: string; failed: string; title: string } }) {
  const max = niceMax(Math.max(0, ...buckets.map((b) => b.succeeded + b.failed)));
  const iw = W - PAD.l - PAD.r;
  const ih = H - PAD.t - PAD.b;
  const bw = iw / Math.max(1, buckets.length);
  const y = (v: number) => PAD.t + ih - (v / max) * ih;
  return (
    <svg viewBox={`0 0 ${W} ${H}`} className="chart" role="img" aria-label={labels.title} data-testid="chart-throughput">
      {[0, max / 2, max].map((v) => (
        <g key={v}>
          <line x1={PAD.l} x2={W - PAD.r} y1={y(v)} y2={y(v)} className="chart-grid" />
          <text x={PAD.l - 4} y={y(v) + 3} className="chart-axis" textAnchor="end">
            {v}
          </text>
        </g>
      ))}
      {buckets.map((b, i) => {
        const x = PAD.l + i * bw + bw * 0.15;
        const w = bw * 0.7;
        const hs = (b.succeeded / max) * ih;
        const hf = (b.failed / max) * ih;
        return (
          <g key={b.start}>
            <title>{`${timeLabel(b.start, locale)}–${timeLabel(b.end, locale)}: ${labels.succeeded} ${b.succeeded}, ${labels.failed} ${b.failed}`}</title>
            <rect x={x} y={PAD.t + ih - hs} width={w} height={hs} className="bar-success" />
            <rect x={x} y={PAD.t + ih - hs - hf} width={w} height={hf} className="bar-failed" />
            {i % 3 === 0 && (
              <text x={x + w / 2} y={H - 6} className="chart-axis" textAnchor="middle">
                {timeLabel(b.start, locale)}
              </text>
            )}
          </g>
        );
      })}
    </svg>
  );
}

export function FailureRateChart({ buckets, locale, title }: { buckets: Bucket[]; locale: string; title: string }) {
  const iw = W - PAD.l - PAD.r;
  const ih = H - PAD.t - PAD.b;
  const bw = iw / Math.max(1, buckets.length);
  const y = (r: number) => PAD.t + ih - r * ih;
  const pts = buckets
    .map((b, i) => (b.failureRate === null ? null : ([PAD.l + i * bw + bw / 2, y(b.failureRate)] as const)))
    .filter((p): p is readonly [number, number] => p !== null);
  return (
    <svg viewBox={`0 0 ${W} ${H}`} className="chart" role="img" aria-label={title} data-testid="chart-failure-rate">
      {[0, 0.5, 1].map((r) => (
        <g key={r}>
          <line x1={PAD.l} x2={W - PAD.r} y1={y(r)} y2={y(r)} className="chart-grid" />
          <text x={PAD.l - 4} y={y(r) + 3} className="chart-axis" textAnchor="end">
            {`${r * 100}%`}
          </text>
        </g>
      ))}
      {pts.length > 1 && <polyline points={pts.map((p) => p.join(',')).join(' ')} className="line-failure" />}
      {buckets.map((b, i) =>
        b.failureRate === null ? null : (
          <circle key={b.start} cx={PAD.l + i * bw + bw / 2} cy={y(b.failureRate)} r={3} className="dot-failure">
            <title>{`${timeLabel(b.start, locale)}: ${Math.round(b.failureRate * 100)}% (${b.failed}/${b.failed + b.succeeded})`}</title>
          </circle>
        ),
      )}
      {buckets.map((b, i) =>
        i % 3 === 0 ? (
          <text key={`l${b.start}`} x={PAD.l + i * bw + bw / 2} y={H - 6} className="chart-axis" textAnchor="middle">
            {timeLabel(b.start, locale)}
          </text>
        ) : null,
      )}
    </svg>
  );
}
