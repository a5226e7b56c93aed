import { useCallback } from 'react';
import { useQuery, useSubscription } from 'urql';
import { INCIDENT_CHANGED, OPEN_INCIDENTS, type AlertIncident } from '../api/alerts';
import { useI18n } from '../i18n';
import { useOnReconnect, useThrottle } from '../lib/hooks';
import { Link } from '../router';

// The banner shows the open incidents on every page, live: each change an
// incident goes through (opened, counted, silenced, resolved) re-reads the
// open ones. A server without alerts (or a viewer it refuses) shows none.
export function IncidentBanner() {
  const { t } = useI18n();
  const [res, reexecute] = useQuery<{ alertIncidents: AlertIncident[] }>({ query: OPEN_INCIDENTS });
  const refresh = useCallback(() => reexecute({ requestPolicy: 'network-only' }), [reexecute]);
  const throttled = useThrottle(refresh, 1000);
  useSubscription({ query: INCIDENT_CHANGED }, (_prev: unknown, data: unknown) => {
    throttled();
    return data;
  });
  useOnReconnect(refresh);
  const open = res.data?.alertIncidents ?? [];
  if (res.error || open.length === 0) return null;
  const latest = open[0];
  return (
    <div className="banner banner-alert" role="alert" data-testid="incident-banner" data-count={open.length}>
      <span>
        <strong>{t('alerts.banner', { n: open.length })}</strong> {latest.ruleName}: {latest.summary}
      </span>
      <Link to="/alerts" className="btn btn-small" data-testid="incident-banner-link">
        {t('alerts.view')}
      </Link>
    </div>
  );
}
