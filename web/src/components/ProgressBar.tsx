export function ProgressBar({ done, total, status, compact = false }: { done: number; total: number; status: string; compact?: boolean }) {
  const known = total > 0;
  const pct = known ? Math.min(100, Math.max(0, (done / total) * 100)) : status === 'SUCCESS' ? 100 : 0;
  const indeterminate = !known && status === 'EXECUTING';
  return (
    <div className={`progress ${compact ? 'progress-compact' : ''}`} data-testid="progress">
      <div
        className={`progress-track progress-${status.toLowerCase()} ${indeterminate ? 'progress-indeterminate' : ''}`}
        role="progressbar"
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={indeterminate ? undefined : Math.round(pct)}
      >
        <div className="progress-fill" style={{ width: indeterminate ? undefined : `${pct}%` }} />
      </div>
      {!compact && (
        <span className="progress-label">
          {known ? `${done.toLocaleString()} / ${total.toLocaleString()} · ${Math.floor(pct)}%` : indeterminate ? '…' : `${Math.floor(pct)}%`}
        </span>
      )}
    </div>
  );
}
