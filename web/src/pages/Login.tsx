import { useState, type FormEvent } from 'react';
import { authHeaders, GRAPHQL_PATH } from '../api/client';
import { setToken } from '../api/session';
import { LANGS, useI18n, type Lang } from '../i18n';

// checkToken asks the server whether it accepts token.
export async function checkToken(token: string): Promise<'ok' | 'rejected' | 'unreachable'> {
  try {
    const res = await fetch(GRAPHQL_PATH, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders(token) },
      body: JSON.stringify({ query: '{ taskStats { total } }' }),
    });
    if (res.status === 401 || res.status === 403) return 'rejected';
    const body = (await res.json().catch(() => null)) as { errors?: { extensions?: { code?: string } }[] } | null;
    if (body?.errors?.some((e) => e.extensions?.code === 'UNAUTHENTICATED' || e.extensions?.code === 'FORBIDDEN')) return 'rejected';
    return 'ok';
  } catch {
    return 'unreachable';
  }
}

export function Login() {
  const { t, lang, setLang } = useI18n();
  const [token, setValue] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    const r = await checkToken(token.trim());
    setBusy(false);
    if (r === 'ok') setToken(token.trim());
    else setError(r === 'rejected' ? t('login.rejected') : t('err.NETWORK'));
  };
  return (
    <div className="login-wrap">
      <form className="card login" onSubmit={submit} data-testid="login-form">
        <div className="login-head">
          <h1>{t('login.title')}</h1>
          <select value={lang} onChange={(e) => setLang(e.target.value as Lang)} aria-label={t('nav.language')}>
            {LANGS.map((l) => (
              <option key={l} value={l}>
                {l === 'en' ? 'English' : '中文'}
              </option>
            ))}
          </select>
        </div>
        <p className="muted">{t('login.help')}</p>
        <div className="field">
          <label htmlFor="token">{t('login.token')}</label>
          <input id="token" type="password" autoComplete="current-password" value={token} onChange={(e) => setValue(e.target.value)} required data-testid="login-token" />
        </div>
        {error && (
          <p className="field-error" role="alert" data-testid="login-error">
            {error}
          </p>
        )}
        <button type="submit" className="btn btn-primary" disabled={busy || !token.trim()} data-testid="login-submit">
          {busy ? t('login.checking') : t('login.submit')}
        </button>
      </form>
    </div>
  );
}
