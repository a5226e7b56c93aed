import type { MessageKey } from '../i18n';
import { useI18n } from '../i18n';

export function StatusChip({ status, testId = 'status-chip' }: { status: string; testId?: string }) {
  const { t } = useI18n();
  return (
    <span className={`chip chip-${status.toLowerCase()}`} data-testid={testId} data-status={status}>
      {t(`status.${status}` as MessageKey)}
    </span>
  );
}
