import { useEffect, useId, useRef, type ReactNode } from 'react';

// A modal confirmation. It keeps focus inside, closes on Escape, and puts
// the safe choice first in the tab order.
export function ConfirmDialog({
  title,
  children,
  confirmLabel,
  cancelLabel,
  onConfirm,
  onClose,
  busy = false,
  danger = false,
  testId = 'confirm-dialog',
}: {
  title: string;
  children?: ReactNode;
  confirmLabel: string;
  cancelLabel: string;
  onConfirm: () => void;
  onClose: () => void;
  busy?: boolean;
  danger?: boolean;
  testId?: string;
}) {
  const id = useId();
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = ref.current;
    (el?.querySelector('input, textarea') as HTMLElement | null)?.focus() ?? (el?.querySelector('button') as HTMLElement | null)?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') onClose();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [onClose]);
  return (
    <div className="modal-backdrop" onClick={onClose}>
      <div
        className="modal"
        role="dialog"
        aria-modal="true"
        aria-labelledby={id}
        data-testid={testId}
        ref={ref}
        onClick={(e) => e.stopPropagation()}
      >
        <h2 id={id}>{title}</h2>
        {children}
        <div className="modal-actions">
          <button type="button" className="btn" onClick={onClose} data-testid="confirm-no">
            {cancelLabel}
          </button>
          <button
            type="button"
            className={`btn ${danger ? 'btn-danger' : 'btn-primary'}`}
            onClick={onConfirm}
            disabled={busy}
            data-testid="confirm-yes"
          >
            {confirmLabel}
          </button>
        </div>
      </div>
    </div>
  );
}
