import { useRef, useState, type DragEvent, type FormEvent } from 'react';
import { gql } from '@urql/core';
import { useQuery } from 'urql';
import type { ApiError } from '../api/errors';
import { useAuth } from '../api/session';
import { uploadImport, UploadError } from '../api/upload';
import { ErrorBox } from '../components/ErrorBox';
import { useI18n } from '../i18n';
import { navigate } from '../router';

// The target offered while the server's list (importTargets) loads.
export const KNOWN_TARGETS = ['contacts'];

const IMPORT_TARGETS = gql`
  query ImportTargets {
    importTargets { name description }
  }
`;

function newKey(): string {
  return typeof crypto !== 'undefined' && 'randomUUID' in crypto ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

function formatSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export function ImportPage() {
  const { t } = useI18n();
  const { token } = useAuth();
  const [file, setFile] = useState<File | null>(null);
  // One idempotency key per chosen file: a double submit or a retry after
  // a lost response returns the same task instead of importing twice.
  const [key, setKey] = useState('');
  const [target, setTarget] = useState(KNOWN_TARGETS[0]);
  const [options, setOptions] = useState('');
  const [dragging, setDragging] = useState(false);
  const [progress, setProgress] = useState<number | null>(null);
  const [errors, setErrors] = useState<ApiError[]>([]);
  const [localError, setLocalError] = useState('');
  const inputRef = useRef<HTMLInputElement>(null);
  // The server's targets: the import goes to one of them, picked from a list.
  const [targetsRes] = useQuery<{ importTargets: { name: string; description: string }[] }>({ query: IMPORT_TARGETS });
  const targetList = targetsRes.data?.importTargets?.length ? targetsRes.data.importTargets : KNOWN_TARGETS.map((name) => ({ name, description: '' }));

  const choose = (f: File | null | undefined) => {
    if (!f) return;
    setFile(f);
    setKey(newKey());
    setErrors([]);
    setLocalError('');
  };
  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    choose(e.dataTransfer.files?.[0]);
  };
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setErrors([]);
    setLocalError('');
    if (!file) {
      setLocalError(t('import.noFile'));
      return;
    }
    let parsed: unknown = undefined;
    if (options.trim()) {
      try {
        parsed = JSON.parse(options);
      } catch (err) {
        setLocalError(t('launch.badJson', { msg: (err as Error).message }));
        return;
      }
    }
    setProgress(0);
    try {
      const task = await uploadImport({ file, target: target.trim(), options: parsed, idempotencyKey: key }, token, setProgress);
      navigate(`/tasks/${task.id}`);
    } catch (err) {
      setProgress(null);
      setErrors(err instanceof UploadError ? err.errors : [{ code: 'UNKNOWN', message: String(err), extensions: {} }]);
    }
  };

  const uploading = progress !== null;
  return (
    <div className="page" data-testid="page-import">
      <h1>{t('import.title')}</h1>
      <form className="card" onSubmit={submit} noValidate>
        <div
          className={`dropzone ${dragging ? 'dragging' : ''} ${file ? 'has-file' : ''}`}
          onDragOver={(e) => {
            e.preventDefault();
            setDragging(true);
          }}
          onDragLeave={() => setDragging(false)}
          onDrop={onDrop}
          onClick={() => inputRef.current?.click()}
          onKeyDown={(e) => {
            if (e.key === 'Enter' || e.key === ' ') {
              e.preventDefault();
              inputRef.current?.click();
            }
          }}
          role="button"
          tabIndex={0}
          aria-label={t('import.drop')}
          data-testid="dropzone"
        >
          {file ? (
            <div>
              <strong data-testid="import-file-name">{file.name}</strong>
              <div className="muted small">{formatSize(file.size)}</div>
            </div>
          ) : (
            <div>
              <div>{dragging ? t('import.dropActive') : t('import.drop')}</div>
              <div className="muted small">{t('import.accept')}</div>
            </div>
          )}
          <input
            ref={inputRef}
            type="file"
            hidden
            accept=".xlsx,.csv,application/vnd.openxmlformats-officedocument.spreadsheetml.sheet,text/csv"
            onChange={(e) => choose(e.target.files?.[0])}
            data-testid="import-file"
          />
        </div>
        {file && !uploading && (
          <button type="button" className="btn btn-ghost btn-small" onClick={() => setFile(null)}>
            {t('import.remove')}
          </button>
        )}
        <div className="options-grid">
          <div className="field">
            <label htmlFor="import-target">{t('import.target')}</label>
            <select id="import-target" value={target} onChange={(e) => setTarget(e.target.value)} data-testid="import-target" required>
              {targetList.map((x) => (
                <option key={x.name} value={x.name}>
                  {x.description ? `${x.name} — ${x.description}` : x.name}
                </option>
              ))}
            </select>
          </div>
          <div className="field grow">
            <label htmlFor="import-options">{t('import.options')}</label>
            <textarea id="import-options" rows={2} className="mono" placeholder="{}" value={options} onChange={(e) => setOptions(e.target.value)} data-testid="import-options" />
          </div>
        </div>
        {localError && (
          <p className="field-error" role="alert">
            {localError}
          </p>
        )}
        <ErrorBox errors={errors} />
        {uploading && (
          <div className="progress">
            <div className="progress-track" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(progress * 100)}>
              <div className="progress-fill" style={{ width: `${progress * 100}%` }} />
            </div>
            <span className="progress-label">{t('import.uploading', { pct: Math.round(progress * 100) })}</span>
          </div>
        )}
        <div className="form-actions">
          <button type="submit" className="btn btn-primary" disabled={uploading || !target.trim()} data-testid="import-submit">
            {t('import.submit')}
          </button>
        </div>
      </form>
    </div>
  );
}
