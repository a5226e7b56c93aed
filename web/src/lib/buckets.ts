// Time buckets for the dashboard charts: the last hour in 5-minute steps,
// aligned to the clock so that consecutive refreshes reuse the same edges.
export const BUCKET_MS = 5 * 60 * 1000;
export const BUCKETS = 12;

export function bucketEdges(now: number, buckets = BUCKETS, size = BUCKET_MS): number[] {
  const end = Math.floor(now / size) * size + size; // the current bucket ends in the future
  return Array.from({ length: buckets + 1 }, (_, i) => end - (buckets - i) * size);
}

export function edgeVariables(edges: number[]): Record<string, string> {
  return Object.fromEntries(edges.map((e, i) => [`t${i}`, new Date(e).toISOString()]));
}

export interface Bucket {
  start: number;
  end: number;
  succeeded: number;
  failed: number;
  // failureRate is failed / finished, null with nothing finished.
  failureRate: number | null;
}

export function toBuckets(edges: number[], data: Record<string, { totalCount: number } | undefined> | undefined): Bucket[] {
  const out: Bucket[] = [];
  for (let i = 0; i + 1 < edges.length; i++) {
    const succeeded = data?.[`s${i}`]?.totalCount ?? 0;
    const failed = data?.[`f${i}`]?.totalCount ?? 0;
    const finished = succeeded + failed;
    out.push({ start: edges[i], end: edges[i + 1], succeeded, failed, failureRate: finished ? failed / finished : null });
  }
  return out;
}
