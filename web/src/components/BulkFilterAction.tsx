// Bulk actions over the list's filter: "Cancel all matching…" /
// "Retry all matching…". The dialog shows the server's preview — how many
// tasks match, how many the action accepts and refuses by state — and asks
// the user to type that number; the server acts only if it is still the
// number matching (otherwise it answers CONFLICT with the new count, shown
// here). The action runs as a task of its own, whose page the console
// opens for its progress.
import { gql } from '@urql/core';
import { useState } from 'react';
import { useClient, useMutation } from 'urql';
import { fromCombined, type ApiError } from '../api/errors';
import { useI18n } from '../i18n';
import { navigate } from '../router';
import { ConfirmDialog } from './ConfirmDialog';

type Action = 'CANCEL' | 'RETRY';

interface Preview {
  matched: number;
  accepted: number;
  refused: number;
  byStatus: { status: string; count: number; accepted: boolean }[];
}

const BULK_PREVIEW = gql`
  query BulkPreview($action: TaskAction!, $where: TaskWhereInput!) {
    bulkPreview(action: $action, where: $where) { matched accepted refused byStatus { status count accepted } }
  }
`;

const BULK_ACTION = gql`
  mutation BulkTaskAction($action: TaskAction!, $where: TaskWhereInput!, $reason: String, $confirm: Int!, $key: String) {
    bulkTaskAction(action: $action, where: $where, reason: $reason, confirm: $confirm, idempotencyKey: $key) { id code status }
  }
`;

const TEXT = {
  en: {
    cancelAll: 'Cancel all matching…',
    retryAll: 'Retry all matching…',
    titleCancel: (n: number) => `Cancel ${n} matching tasks?`,
    titleRetry: (n: number) => `Retry ${n} matching tasks?`,
    loading: 'Counting the matching tasks…',
    summary: (p: Preview) => `${p.matched} tasks match this filter: ${p.accepted} will be acted on, ${p.refused} will be refused by their state and left alone.`,
    typeToConfirm: (n: number) => `Type ${n} to confirm`,
    reason: 'Reason (optional)',
    confirm: (n: number) => `Yes, act on ${n} tasks`,
    close: 'Keep them',
    changed: (n: number) => `The number of matching tasks changed: ${n} match now. Check the new count and confirm again.`,
    none: 'No task matches this filter.',
  },
  zh: {
    cancelAll: '取消全部匹配…',
    retryAll: '重试全部匹配…',
    titleCancel: (n: number) => `取消 ${n} 个匹配的任务？`,
    titleRetry: (n: number) => `重试 ${n} 个匹配的任务？`,
    loading: '正在统计匹配的任务…',
    summary: (p: Preview) => `共 ${p.matched} 个任务匹配此筛选：${p.accepted} 个将被处理，${p.refused} 个因状态不允许而跳过。`,
    typeToConfirm: (n: number) => `输入 ${n} 以确认`,
    reason: '原因（可选）',
    confirm: (n: number) => `确认处理 ${n} 个任务`,
    close: '保留',
    changed: (n: number) => `匹配的任务数已变化：现在为 ${n} 个。请核对后重新确认。`,
    none: '没有任务匹配此筛选。',
  },
};

export function BulkFilterAction({ where }: { where: Record<string, unknown> | null }) {
  const { lang } = useI18n();
  const tx = lang === 'zh' ? TEXT.zh : TEXT.en;
  const client = useClient();
  const [action, setAction] = useState<Action | null>(null);
  const [preview, setPreview] = useState<Preview | null>(null);
  const [typed, setTyped] = useState('');
  const [reason, setReason] = useState('');
  const [errors, setErrors] = useState<ApiError[]>([]);
  const [key, setKey] = useState('');
  const [state, submit] = useMutation<{ bulkTaskAction: { id: string } }>(BULK_ACTION);
  const vars = (a: Action) => ({ action: a, where: where ?? {} });

  const load = async (a: Action) => {
    setPreview(null);
    setTyped('');
    const res = await client.query<{ bulkPreview: Preview }>(BULK_PREVIEW, vars(a), { requestPolicy: 'network-only' }).toPromise();
    if (res.error) setErrors(fromCombined(res.error));
    else if (res.data) setPreview(res.data.bulkPreview);
  };
  const open = (a: Action) => {
    setAction(a);
    setErrors([]);
    setReason('');
    // One key per dialog: a double click or a retried request is one bulk task.
    setKey(`console-${Date.now()}-${Math.random().toString(36).slice(2)}`);
    void load(a);
  };
  const close = () => setAction(null);
  const go = async () => {
    if (!action || !preview) return;
    const res = await submit({ ...vars(action), reason: action === 'CANCEL' && reason ? reason : null, confirm: preview.matched, key });
    if (res.error) {
      const errs = fromCombined(res.error);
      const changed = errs.find((e) => e.code === 'CONFLICT' && typeof e.extensions.matched === 'number');
      if (changed) {
        setErrors([{ ...changed, message: tx.changed(changed.extensions.matched as number) }]);
        setKey(`console-${Date.now()}-${Math.random().toString(36).slice(2)}`);
        void load(action);
      } else setErrors(errs);
      return;
    }
    if (res.data) navigate(`/tasks/${res.data.bulkTaskAction.id}`);
  };

  const n = preview?.matched ?? 0;
  const ready = preview !== null && n > 0 && typed.trim() === String(n);
  return (
    <div className="bulk-filter-actions" data-testid="bulk-filter-actions">
      <button type="button" className="btn btn-danger-outline btn-small" onClick={() => open('CANCEL')} data-testid="bulk-filter-cancel">
        {tx.cancelAll}
      </button>
      <button type="button" className="btn btn-small" onClick={() => open('RETRY')} data-testid="bulk-filter-retry">
        {tx.retryAll}
      </button>
      {action && (
        <ConfirmDialog
          title={preview ? (action === 'CANCEL' ? tx.titleCancel(n) : tx.titleRetry(n)) : tx.loading}
          confirmLabel={tx.confirm(n)}
          cancelLabel={tx.close}
          onConfirm={go}
          onClose={close}
          busy={!ready || state.fetching}
          danger={action === 'CANCEL'}
          testId="bulk-filter-dialog"
        >
          {errors.map((e, i) => (
            <p key={i} className="error" role="alert" data-testid="bulk-filter-error" data-code={e.code}>
              {e.message}
            </p>
          ))}
          {preview && n === 0 && <p data-testid="bulk-filter-none">{tx.none}</p>}
          {preview && n > 0 && (
            <>
              <p data-testid="bulk-filter-summary" data-matched={n}>
                {tx.summary(preview)}
              </p>
              <ul className="bulk-filter-states">
                {preview.byStatus.map((s) => (
                  <li key={s.status} data-status={s.status} data-accepted={s.accepted}>
                    {s.status}: {s.count} {s.accepted ? '✓' : '—'}
                  </li>
                ))}
              </ul>
              {action === 'CANCEL' && (
                <label style={{ display: 'block', marginTop: 8 }}>
                  {tx.reason}
                  <input style={{ display: 'block', width: '100%' }} value={reason} onChange={(e) => setReason(e.target.value)} maxLength={500} data-testid="bulk-filter-reason" />
                </label>
              )}
              <label style={{ display: 'block', marginTop: 8 }}>
                {tx.typeToConfirm(n)}
                <input style={{ display: 'block', width: '100%' }} value={typed} onChange={(e) => setTyped(e.target.value)} inputMode="numeric" data-testid="bulk-filter-typed" />
              </label>
            </>
          )}
        </ConfirmDialog>
      )}
    </div>
  );
}
