// The decisions on one task, a projection of Task.availableActions like
// every other button: approve and retry, edit and retry, accept, reject
// (a task in REVIEW_PENDING), and replay with an edited input (a FAILED
// task). The server decides who may (a viewer, the submitter under four
// eyes); its refusal is shown here as a sentence, not a code.
import { useState } from 'react';
import { useMutation } from 'urql';
import { describe, fromCombined, type ApiError } from '../api/errors';
import { ACCEPT_REVIEW, APPROVE_REVIEW, EDIT_AND_RETRY, REJECT_REVIEW, REPLAY_WITH_INPUT } from '../api/review';
import type { TaskAction } from '../api/queries';
import { useI18n, type MessageKey, type Translate } from '../i18n';
import { parseJsonInput } from '../lib/review';
import { ConfirmDialog } from './ConfirmDialog';

export interface DecisionTarget {
  id: string;
  code: string;
  availableActions: TaskAction[];
  input: unknown;
  review: { fourEyes: boolean; submittedBy: string } | null;
}

export const DECISIONS = ['APPROVE_REVIEW', 'EDIT_AND_RETRY', 'ACCEPT_REVIEW', 'REJECT_REVIEW', 'REPLAY_WITH_INPUT'] as const;
type Decision = (typeof DECISIONS)[number];

// decisionMessage is the sentence for a refused decision: four eyes, a
// race lost to another reviewer, or what the server said.
export function decisionMessage(e: ApiError, fourEyes: boolean, t: Translate): string {
  if (e.code === 'FORBIDDEN' && (fourEyes || /four.eyes|submitter/i.test(e.message))) return t('review.fourEyesRefused');
  if (e.code === 'INVALID_TRANSITION') return t('review.alreadyDecided');
  const d = describe(e, t);
  return [d.title, ...d.details].join(' ');
}

export function ReviewDecisions({ task, onDecided }: { task: DecisionTarget; onDecided?: (action: Decision) => void }) {
  const { t } = useI18n();
  const [open, setOpen] = useState<Decision | null>(null);
  const [reason, setReason] = useState('');
  const [errors, setErrors] = useState<ApiError[]>([]);
  const [reasonMissing, setReasonMissing] = useState(false);
  const [approveState, approve] = useMutation(APPROVE_REVIEW);
  const [acceptState, accept] = useMutation(ACCEPT_REVIEW);
  const [rejectState, reject] = useMutation(REJECT_REVIEW);
  const busy = approveState.fetching || acceptState.fetching || rejectState.fetching;
  const fourEyes = !!task.review?.fourEyes;
  const offered = DECISIONS.filter((d) => task.availableActions.includes(d));
  if (offered.length === 0 && errors.length === 0) return null;

  const show = (d: Decision) => {
    setOpen(d);
    setReason('');
    setErrors([]);
    setReasonMissing(false);
  };
  const close = () => setOpen(null);
  const finish = (d: Decision, error: Parameters<typeof fromCombined>[0]) => {
    const errs = fromCombined(error);
    setErrors(errs);
    if (errs.length === 0) {
      setOpen(null);
      onDecided?.(d);
    }
  };
  const confirm = async () => {
    const why = reason.trim();
    if (open === 'REJECT_REVIEW') {
      if (!why) {
        setReasonMissing(true);
        return;
      }
      finish(open, (await reject({ id: task.id, reason: why })).error);
    } else if (open === 'APPROVE_REVIEW') finish(open, (await approve({ id: task.id, reason: why || null })).error);
    else if (open === 'ACCEPT_REVIEW') finish(open, (await accept({ id: task.id, reason: why || null })).error);
  };

  const title =
    open === 'APPROVE_REVIEW'
      ? t('review.confirmApprove', { code: task.code })
      : open === 'ACCEPT_REVIEW'
        ? t('review.confirmAccept', { code: task.code })
        : t('review.confirmReject', { code: task.code });

  return (
    <div className="review-decisions" data-testid="review-decisions">
      <div className="actions">
        {offered.map((d) => (
          <button
            key={d}
            type="button"
            className={`btn ${d === 'REJECT_REVIEW' ? 'btn-danger-outline' : d === 'APPROVE_REVIEW' ? 'btn-primary' : ''}`}
            onClick={() => show(d)}
            disabled={busy}
            aria-expanded={d === 'EDIT_AND_RETRY' || d === 'REPLAY_WITH_INPUT' ? open === d : undefined}
            data-testid={`decide-${d}`}
          >
            {t(`review.action.${d}` as MessageKey)}
          </button>
        ))}
      </div>
      {open && open !== 'EDIT_AND_RETRY' && open !== 'REPLAY_WITH_INPUT' && (
        <ConfirmDialog
          title={title}
          confirmLabel={t(`review.action.${open}` as MessageKey)}
          cancelLabel={t('review.back')}
          danger={open === 'REJECT_REVIEW'}
          busy={busy}
          onClose={close}
          onConfirm={() => void confirm()}
          testId="decision-dialog"
        >
          <label className="field">
            <span>{open === 'REJECT_REVIEW' ? t('review.reasonRequired') : t('review.reasonOptional')}</span>
            <textarea
              rows={3}
              value={reason}
              maxLength={2000}
              aria-invalid={reasonMissing}
              onChange={(e) => {
                setReason(e.target.value);
                setReasonMissing(false);
              }}
              data-testid="decision-reason"
            />
            {reasonMissing && (
              <span className="field-error" role="alert" data-testid="decision-reason-missing">
                {t('review.reasonMissing')}
              </span>
            )}
          </label>
          <DecisionErrors errors={errors} fourEyes={fourEyes} />
        </ConfirmDialog>
      )}
      {(open === 'EDIT_AND_RETRY' || open === 'REPLAY_WITH_INPUT') && (
        <InputEditor key={open} task={task} replay={open === 'REPLAY_WITH_INPUT'} onClose={close} onDone={() => {
          setOpen(null);
          onDecided?.(open);
        }} />
      )}
      {!open && <DecisionErrors errors={errors} fourEyes={fourEyes} />}
    </div>
  );
}

function DecisionErrors({ errors, fourEyes }: { errors: ApiError[]; fourEyes: boolean }) {
  const { t } = useI18n();
  if (errors.length === 0) return null;
  return (
    <div className="error-box" role="alert" data-testid="decision-error" data-code={errors[0].code}>
      {errors.map((e, i) => (
        <p key={i}>{decisionMessage(e, fourEyes, t)}</p>
      ))}
    </div>
  );
}

// maskedLeft counts the masked placeholders still in the edited text: the
// server takes the edit as typed, so a placeholder left in place becomes
// the new value.
export function maskedLeft(text: string): number {
  return text.split('******').length - 1;
}

// InputEditor edits the input as JSON. The server validates it (the
// type's schema, as on create); its problems are shown under the box, and
// the text typed is kept, whatever the answer.
function InputEditor({ task, replay, onClose, onDone }: { task: DecisionTarget; replay: boolean; onClose: () => void; onDone: () => void }) {
  const { t } = useI18n();
  const [text, setText] = useState(() => JSON.stringify(task.input ?? {}, null, 2));
  const [reason, setReason] = useState('');
  const [local, setLocal] = useState<string | null>(null);
  const [reasonMissing, setReasonMissing] = useState(false);
  const [errors, setErrors] = useState<ApiError[]>([]);
  const [editState, edit] = useMutation(EDIT_AND_RETRY);
  const [replayState, replayWith] = useMutation(REPLAY_WITH_INPUT);
  const busy = editState.fetching || replayState.fetching;

  const submit = async () => {
    setErrors([]);
    const parsed = parseJsonInput(text);
    if (!parsed.ok) {
      setLocal(parsed.message === 'empty' ? t('review.edit.empty') : t('review.edit.badJson', { msg: parsed.message }));
      return;
    }
    setLocal(null);
    const why = reason.trim();
    if (!why) {
      setReasonMissing(true);
      return;
    }
    const vars = { id: task.id, input: parsed.value, reason: why };
    const r = replay ? await replayWith(vars) : await edit(vars);
    const errs = fromCombined(r.error);
    if (errs.length) setErrors(errs);
    else onDone();
  };

  const validation = errors.filter((e) => e.code === 'VALIDATION');
  const other = errors.filter((e) => e.code !== 'VALIDATION');
  return (
    <form
      className="card input-editor"
      data-testid="input-editor"
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
    >
      <h3>{replay ? t('review.replay.title', { code: task.code }) : t('review.edit.title', { code: task.code })}</h3>
      <p className="muted small">{t('review.edit.help')}</p>
      <label className="field">
        <span>{t('review.edit.input')}</span>
        <textarea
          className="mono json-editor"
          rows={Math.min(24, Math.max(6, text.split('\n').length + 1))}
          spellCheck={false}
          value={text}
          aria-invalid={!!local || validation.length > 0}
          onChange={(e) => {
            setText(e.target.value);
            setLocal(null);
          }}
          data-testid="input-editor-json"
        />
      </label>
      {maskedLeft(text) > 0 && (
        <p className="notice notice-warn small" data-testid="input-editor-masked">
          {t('review.edit.maskedLeft', { n: maskedLeft(text) })}
        </p>
      )}
      {local && (
        <p className="field-error" role="alert" data-testid="input-editor-local-error">
          {local}
        </p>
      )}
      {validation.length > 0 && (
        <div className="field-error" role="alert" data-testid="input-editor-errors" data-code="VALIDATION">
          {validation.map((e, i) => {
            const d = describe(e, t);
            return (
              <div key={i}>
                <strong>{d.title}</strong>
                <ul>
                  {d.details.map((line, j) => (
                    <li key={j} data-testid="input-editor-problem">
                      {line}
                    </li>
                  ))}
                </ul>
              </div>
            );
          })}
        </div>
      )}
      <label className="field">
        <span>{t('review.reasonRequired')}</span>
        <input
          value={reason}
          maxLength={2000}
          aria-invalid={reasonMissing}
          onChange={(e) => {
            setReason(e.target.value);
            setReasonMissing(false);
          }}
          data-testid="input-editor-reason"
        />
        {reasonMissing && (
          <span className="field-error" role="alert" data-testid="input-editor-reason-missing">
            {t('review.reasonMissing')}
          </span>
        )}
      </label>
      <DecisionErrors errors={other} fourEyes={!!task.review?.fourEyes} />
      <div className="form-actions">
        <button type="button" className="btn" onClick={onClose} data-testid="input-editor-cancel">
          {t('review.back')}
        </button>
        <button type="submit" className="btn btn-primary" disabled={busy} data-testid="input-editor-submit">
          {replay ? t('review.replay.submit') : t('review.edit.submit')}
        </button>
      </div>
    </form>
  );
}
