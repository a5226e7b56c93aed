import { useEffect, useState } from 'react';
import { retryNow } from '../api/client';
import { useConnection } from '../api/session';
import { useI18n } from '../i18n';

// The banner says when the live connection is down and when it is back;
// while it is down nothing on screen is live, so the operator must know.
export function ConnectionBanner() {
  const { t } = useI18n();
  const conn = useConnection();
  const [now, setNow] = useState(() => Date.now());
  const lost = conn.phase === 'lost';
  const recentlyRestored = conn.phase === 'connected' && conn.restoredAt !== null && now - conn.restoredAt < 4000;
  useEffect(() => {
    if (!lost && !recentlyRestored) return;
    const id = setInterval(() => setNow(Date.now()), 500);
    return () => clearInterval(id);
  }, [lost, recentlyRestored]);
  useEffect(() => setNow(Date.now()), [conn]);

  if (lost) {
    const secs = conn.retryAt ? Math.max(0, Math.ceil((conn.retryAt - now) / 1000)) : 0;
    return (
      <div className="banner banner-error" role="alert" data-testid="connection-lost">
        <span>{secs > 0 ? t('conn.lostIn', { s: secs }) : t('conn.lost')}</span>
        <button type="button" className="btn btn-small" onClick={retryNow}>
          {t('conn.retryNow')}
        </button>
      </div>
    );
  }
  if (recentlyRestored) {
    return (
      <div className="banner banner-ok" role="status" data-testid="connection-restored">
        {t('conn.restored')}
      </div>
    );
  }
  return null;
}
