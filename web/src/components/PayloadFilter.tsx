import { useId, useMemo, useState } from 'react';
import { useI18n, type MessageKey } from '../i18n';
import { PAYLOAD_OPS, schemaPaths, validPath, type PayloadCond, type PayloadOn, type PayloadOp } from '../lib/payload';

// PayloadFilter edits the task list's conditions on a path of the tasks'
// input (as stored: masked) or result. The selected type's input schema
// suggests the input's paths.
export function PayloadFilter({ value, onChange, inputSchema }: { value: PayloadCond[]; onChange: (next: PayloadCond[]) => void; inputSchema: unknown }) {
  const { t } = useI18n();
  const listId = useId();
  const [on, setOn] = useState<PayloadOn>('input');
  const [path, setPath] = useState('');
  const [op, setOp] = useState<PayloadOp>('eq');
  const [val, setVal] = useState('');
  const paths = useMemo(() => (on === 'input' ? schemaPaths(inputSchema) : []), [on, inputSchema]);
  const bad = path !== '' && !validPath(path);
  const needsValue = op === 'eq' || op === 'prefix';
  const canAdd = path !== '' && !bad && (!needsValue || val !== '') && value.length < 10;

  const add = () => {
    if (!canAdd) return;
    const kind = on === 'input' && op === 'eq' ? paths.find((p) => p.path === path)?.kind : undefined;
    onChange([...value, { on, path, op, value: needsValue ? val : '', ...(kind ? { kind } : {}) }]);
    setVal('');
  };

  return (
    <div className="payload-filter" data-testid="payload-filter" style={{ marginBottom: '0.75rem' }}>
      <div className="filters" role="group" aria-label={t('payload.title')}>
        <label className="field">
          <span>{t('payload.on')}</span>
          <select value={on} onChange={(e) => setOn(e.target.value as PayloadOn)} data-testid="payload-on">
            <option value="input">{t('payload.on.input')}</option>
            <option value="result">{t('payload.on.result')}</option>
          </select>
        </label>
        <label className="field grow">
          <span>{t('payload.path')}</span>
          <input
            value={path}
            onChange={(e) => setPath(e.target.value.trim())}
            onKeyDown={(e) => {
              if (e.key === 'Enter') {
                e.preventDefault();
                add();
              }
            }}
            list={listId}
            placeholder="customer.city"
            aria-invalid={bad}
            className="mono"
            data-testid="payload-path"
          />
          <datalist id={listId} data-testid="payload-paths">
            {paths.map((p) => (
              <option key={p.path} value={p.path}>
                {p.kind ?? ''}
              </option>
            ))}
          </datalist>
        </label>
        <label className="field">
          <span>{t('payload.op')}</span>
          <select value={op} onChange={(e) => setOp(e.target.value as PayloadOp)} data-testid="payload-op">
            {PAYLOAD_OPS.map((o) => (
              <option key={o} value={o}>
                {t(`payload.op.${o}` as MessageKey)}
              </option>
            ))}
          </select>
        </label>
        {needsValue && (
          <label className="field">
            <span>{t('payload.value')}</span>
            <input
              value={val}
              onChange={(e) => setVal(e.target.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter') {
                  e.preventDefault();
                  add();
                }
              }}
              data-testid="payload-value"
            />
          </label>
        )}
        <button type="button" className="btn btn-small" disabled={!canAdd} onClick={add} data-testid="payload-add">
          {t('payload.add')}
        </button>
      </div>
      {bad && (
        <p className="muted small" role="alert" data-testid="payload-bad-path">
          {t('payload.badPath')}
        </p>
      )}
      {value.length > 0 && (
        <ul aria-label={t('payload.title')} style={{ listStyle: 'none', display: 'flex', flexWrap: 'wrap', gap: '0.5rem', padding: 0, margin: '0.5rem 0' }}>
          {value.map((c, i) => (
            <li key={i} className="chip" data-testid="payload-cond">
              <span className="mono">
                {t(`payload.on.${c.on}` as MessageKey)}.{c.path} {t(`payload.op.${c.op}` as MessageKey)}
                {c.op === 'eq' || c.op === 'prefix' ? ` “${c.value}”` : ''}
              </span>{' '}
              <button
                type="button"
                className="btn btn-ghost btn-small"
                aria-label={t('payload.remove')}
                onClick={() => onChange(value.filter((_, j) => j !== i))}
                data-testid="payload-remove"
              >
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
