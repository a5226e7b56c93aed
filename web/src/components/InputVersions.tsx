// Every input a task ran with, each edit shown as the API's field-by-field
// diff from the version before. A masked (sensitive) field says "changed"
// and nothing else: the API gives neither value, and nothing here would
// print one.
import type { InputVersion } from '../api/review';
import { useI18n, type MessageKey } from '../i18n';
import { shownValue, type FieldChange } from '../lib/review';
import { formatDateTime } from '../lib/time';
import { JsonView } from './JsonView';

export function InputVersions({ versions }: { versions: InputVersion[] }) {
  const { t, locale } = useI18n();
  if (versions.length <= 1) return null;
  // Newest first: the change a reviewer made last is what one looks for.
  const list = [...versions].sort((a, b) => b.version - a.version);
  return (
    <section className="card" aria-labelledby="input-versions" data-testid="input-versions">
      <h2 id="input-versions">{t('review.versions')}</h2>
      <ol className="versions">
        {list.map((v) => (
          <li key={v.version} data-testid="input-version" data-version={v.version}>
            <div className="timeline-head">
              <strong>{t('review.version', { n: v.version })}</strong>
              <span className="muted small">
                {v.version === 1 ? t('review.versionOriginal') + ' · ' : ''}
                {t('review.versionBy', { who: v.author, at: formatDateTime(v.createdAt, locale), n: v.fromInstanceNo })}
              </span>
            </div>
            {v.reason && <p className="small" data-testid="input-version-reason">{v.reason}</p>}
            {v.version > 1 && <FieldDiff changes={v.diff} />}
            <details>
              <summary className="small">{t('detail.input')}</summary>
              <JsonView value={v.input} />
            </details>
          </li>
        ))}
      </ol>
    </section>
  );
}

export function FieldDiff({ changes }: { changes: FieldChange[] }) {
  const { t } = useI18n();
  if (changes.length === 0) return <p className="muted small">{t('review.diff.none')}</p>;
  return (
    <div className="table-wrap">
      <table className="table diff" data-testid="input-diff">
        <thead>
          <tr>
            <th>{t('review.diff.path')}</th>
            <th>{t('review.diff.change')}</th>
            <th>{t('review.diff.before')}</th>
            <th>{t('review.diff.after')}</th>
          </tr>
        </thead>
        <tbody>
          {changes.map((c) => (
            <tr key={c.path} data-testid="diff-row" data-path={c.path} data-kind={c.kind} data-masked={c.masked}>
              <td className="mono">{c.path}</td>
              <td>
                <span className={`badge diff-${c.kind.toLowerCase()}`}>{c.masked ? t('review.diff.masked') : t(`review.diff.${c.kind}` as MessageKey)}</span>
              </td>
              {c.masked ? (
                <td colSpan={2} className="muted" data-testid="diff-masked">
                  ******
                </td>
              ) : (
                <>
                  <td className="mono diff-before" data-testid="diff-before">
                    {c.kind === 'ADDED' ? '—' : shownValue(c.before)}
                  </td>
                  <td className="mono diff-after" data-testid="diff-after">
                    {c.kind === 'REMOVED' ? '—' : shownValue(c.after)}
                  </td>
                </>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
