import type { CombinedError } from '@urql/core';
import { describe, fromCombined, type ApiError } from '../api/errors';
import { useI18n } from '../i18n';

export function ErrorBox({ error, errors, onDismiss }: { error?: CombinedError | null; errors?: ApiError[]; onDismiss?: () => void }) {
  const { t } = useI18n();
  const list = errors ?? fromCombined(error);
  if (list.length === 0) return null;
  return (
    <div className="error-box" role="alert" data-testid="error" data-code={list[0].code}>
      {list.map((e, i) => {
        const d = describe(e, t);
        return (
          <div key={i}>
            <strong>{d.title}</strong>
            {d.details.length > 0 && (
              <ul>
                {d.details.map((line, j) => (
                  <li key={j}>{line}</li>
                ))}
              </ul>
            )}
          </div>
        );
      })}
      {onDismiss && (
        <button type="button" className="btn btn-ghost btn-small" onClick={onDismiss}>
          {t('err.dismiss')}
        </button>
      )}
    </div>
  );
}
