import type { FieldError, FieldSpec, FormValues, KeyValue } from '../lib/schemaForm';
import { useI18n } from '../i18n';

// SchemaForm renders the fields of a task type's input schema. Every input
// is labelled and named after its property (data-testid="input-<name>").
export function SchemaForm({
  fields,
  values,
  onChange,
  errors,
  serverErrors,
}: {
  fields: FieldSpec[];
  values: FormValues;
  onChange: (name: string, v: FormValues[string]) => void;
  errors: Record<string, FieldError>;
  serverErrors: Record<string, string>;
}) {
  const { t } = useI18n();
  return (
    <div className="schema-form">
      {fields.map((f) => {
        const id = `in-${f.name}`;
        const err = errors[f.name] ? t(errors[f.name].key, errors[f.name].vars) : serverErrors[`input.${f.name}`];
        const v = values[f.name];
        const describedBy = err ? `${id}-err` : f.description ? `${id}-help` : undefined;
        const common = { id, 'aria-invalid': !!err, 'aria-describedby': describedBy, 'data-testid': `input-${f.name}` };
        let control;
        switch (f.kind) {
          case 'boolean':
            control = <input type="checkbox" {...common} checked={v === true} onChange={(e) => onChange(f.name, e.target.checked)} />;
            break;
          case 'enum':
            control = (
              <select {...common} value={String(v ?? '')} onChange={(e) => onChange(f.name, e.target.value)}>
                <option value="">{f.defaultValue !== undefined ? `${t('launch.default')}: ${String(f.defaultValue)}` : '—'}</option>
                {f.options.map((o) => (
                  <option key={o} value={o}>
                    {o}
                  </option>
                ))}
              </select>
            );
            break;
          case 'integer':
          case 'number':
            control = (
              <input
                {...common}
                type="number"
                inputMode={f.kind === 'integer' ? 'numeric' : 'decimal'}
                step={f.kind === 'integer' ? 1 : 'any'}
                min={f.minimum}
                max={f.maximum}
                placeholder={f.defaultValue !== undefined ? String(f.defaultValue) : ''}
                value={String(v ?? '')}
                onChange={(e) => onChange(f.name, e.target.value)}
              />
            );
            break;
          case 'map':
            control = <KeyValueEditor id={id} testId={`input-${f.name}`} pairs={Array.isArray(v) ? v : []} onChange={(p) => onChange(f.name, p)} />;
            break;
          case 'json':
            control = <textarea {...common} rows={4} className="mono" placeholder="{}" value={String(v ?? '')} onChange={(e) => onChange(f.name, e.target.value)} />;
            break;
          default:
            control = (
              <input
                {...common}
                type={f.kind === 'url' ? 'url' : 'text'}
                inputMode={f.kind === 'url' ? 'url' : undefined}
                maxLength={f.maxLength}
                placeholder={f.kind === 'url' ? 'https://' : f.defaultValue !== undefined ? String(f.defaultValue) : ''}
                value={String(v ?? '')}
                onChange={(e) => onChange(f.name, e.target.value)}
              />
            );
        }
        return (
          <div key={f.name} className={`field ${f.kind === 'boolean' ? 'field-check' : ''}`}>
            <label htmlFor={id}>
              <span className="mono">{f.name}</span>
              {f.required && <span className="required" aria-hidden="true"> *</span>}
            </label>
            {control}
            {f.description && !err && (
              <small id={`${id}-help`} className="muted">
                {f.description}
              </small>
            )}
            {err && (
              <small id={`${id}-err`} className="field-error" role="alert">
                {err}
              </small>
            )}
          </div>
        );
      })}
    </div>
  );
}

function KeyValueEditor({ id, testId, pairs, onChange }: { id: string; testId: string; pairs: KeyValue[]; onChange: (p: KeyValue[]) => void }) {
  const { t } = useI18n();
  const set = (i: number, patch: Partial<KeyValue>) => onChange(pairs.map((p, j) => (j === i ? { ...p, ...patch } : p)));
  return (
    <div className="kv" id={id} data-testid={testId}>
      {pairs.map((p, i) => (
        <div className="kv-row" key={i}>
          <input aria-label={t('launch.keyValue.key')} placeholder={t('launch.keyValue.key')} value={p.key} onChange={(e) => set(i, { key: e.target.value })} />
          <input aria-label={t('launch.keyValue.value')} placeholder={t('launch.keyValue.value')} value={p.value} onChange={(e) => set(i, { value: e.target.value })} />
          <button type="button" className="btn btn-ghost btn-small" onClick={() => onChange(pairs.filter((_, j) => j !== i))} aria-label={t('launch.keyValue.remove')}>
            ✕
          </button>
        </div>
      ))}
      <button type="button" className="btn btn-small" onClick={() => onChange([...pairs, { key: '', value: '' }])}>
        + {t('launch.keyValue.add')}
      </button>
    </div>
  );
}
