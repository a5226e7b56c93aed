// The buttons of one task are a projection of Task.availableActions, which
// the server derives from the state machine: a button exists only when its
// transition is legal now.
import { useState } from 'react';
import { useMutation } from 'urql';
import { CANCEL_TASK, RETRY_TASK, type TaskAction } from '../api/queries';
import { useI18n } from '../i18n';
import { ConfirmDialog } from './ConfirmDialog';
import { ErrorBox } from './ErrorBox';

export interface ActionTarget {
  id: string;
  code: string;
  availableActions: TaskAction[];
}

export function ActionButtons({ task, small = false }: { task: ActionTarget; small?: boolean }) {
  const { t } = useI18n();
  const [confirming, setConfirming] = useState(false);
  const [reason, setReason] = useState('');
  const [cancelState, cancel] = useMutation(CANCEL_TASK);
  const [retryState, retry] = useMutation(RETRY_TASK);
  const [showError, setShowError] = useState(false);
  const error = cancelState.error ?? retryState.error;
  const cls = `btn ${small ? 'btn-small' : ''}`;

  return (
    <div className="actions" data-testid="task-actions">
      {task.availableActions.includes('CANCEL') && (
        <button
          type="button"
          className={`${cls} btn-danger-outline`}
          data-testid="action-cancel"
          aria-label={`${t('action.CANCEL')} ${task.code}`}
          disabled={cancelState.fetching}
          onClick={() => setConfirming(true)}
        >
          {t('action.CANCEL')}
        </button>
      )}
      {task.availableActions.includes('RETRY') && (
        <button
          type="button"
          className={`${cls} btn-primary`}
          data-testid="action-retry"
          aria-label={`${t('action.RETRY')} ${task.code}`}
          disabled={retryState.fetching}
          onClick={async () => {
            const r = await retry({ id: task.id });
            setShowError(!!r.error);
          }}
        >
          {t('action.RETRY')}
        </button>
      )}
      {confirming && (
        <ConfirmDialog
          title={t('action.confirmCancel', { code: task.code })}
          confirmLabel={t('action.CANCEL')}
          cancelLabel={t('action.back')}
          danger
          busy={cancelState.fetching}
          onClose={() => setConfirming(false)}
          onConfirm={async () => {
            const r = await cancel({ id: task.id, reason: reason.trim() || null });
            setConfirming(false);
            setReason('');
            setShowError(!!r.error);
          }}
        >
          <label className="field">
            <span>{t('action.reason')}</span>
            <input value={reason} maxLength={500} onChange={(e) => setReason(e.target.value)} data-testid="cancel-reason" />
          </label>
        </ConfirmDialog>
      )}
      {showError && error && <ErrorBox error={error} onDismiss={() => setShowError(false)} />}
    </div>
  );
}
