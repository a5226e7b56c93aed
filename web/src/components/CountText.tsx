// CountText shows a count of tasks: as it is when it was counted, or as
// "≈N" with its 95% interval in the tooltip when the server estimated it
// (a long history whose exact count would take longer than a page should).
import { useI18n } from '../i18n';

export interface Counted {
  count: number;
  low: number;
  high: number;
}

export function CountText({ c, exact, sampled }: { c: Counted; exact: boolean; sampled: number }) {
  const { t } = useI18n();
  if (exact) return <>{c.count}</>;
  return (
    <span data-estimate="true" title={t('count.estimate', { low: c.low, high: c.high, pct: Math.max(1, Math.round(sampled * 100)) })}>
      ≈{c.count}
    </span>
  );
}
