import { lazy, Suspense, useEffect, useState } from 'react';
import { Provider } from 'urql';
import { useAccess } from './api/access';
import { createApi, Uncached, type Api } from './api/client';
import { connection, signOut, useAuth, useConnection } from './api/session';
import { ConnectionBanner } from './components/ConnectionBanner';
import { IncidentBanner } from './components/IncidentBanner';
import { LANGS, useI18n, type Lang } from './i18n';
import { AlertsPage } from './pages/Alerts';
import { Audit } from './pages/Audit';
import { Dashboard } from './pages/Dashboard';
import { ImportPage } from './pages/Import';
import { Launch } from './pages/Launch';
import { Nodes } from './pages/Nodes';
import { ReviewQueue } from './pages/Review';
import { Login } from './pages/Login';
import { ScheduleDetail } from './pages/ScheduleDetail';
import { Schedules } from './pages/Schedules';
import { TaskDetail } from './pages/TaskDetail';
import { TaskList } from './pages/TaskList';
import { Tenants } from './pages/Tenants';
import { Types } from './pages/Types';
import { Workflows } from './pages/Workflows';
import { Link, useLocation } from './router';

// The workflow page carries the layout library (dagre): loaded when opened.
const WorkflowDetail = lazy(() => import('./pages/WorkflowDetail').then((m) => ({ default: m.WorkflowDetail })));

export function App() {
  const { token, needsLogin } = useAuth();
  // A new token means a new client: the websocket's connection_init
  // carries the token, and cached data of another user must not show.
  const [api, setApi] = useState<Api | null>(null);
  useEffect(() => {
    connection.set({ ...connection.get(), phase: 'connecting', retryAt: null });
    const a = createApi(token);
    setApi(a);
    return () => a.dispose();
  }, [token]);
  if (needsLogin) return <Login />;
  if (!api) return null;
  return (
    <Provider value={api.client}>
      <Uncached.Provider value={api.uncached}>
        <Shell signedIn={!!token} />
      </Uncached.Provider>
    </Provider>
  );
}

function Shell({ signedIn }: { signedIn: boolean }) {
  const { t, lang, setLang } = useI18n();
  const { path } = useLocation();
  const conn = useConnection();
  const access = useAccess(signedIn);
  const nav: { to: string; label: string; id: string; show: boolean }[] = [
    { to: '/', label: t('nav.dashboard'), id: 'dashboard', show: true },
    { to: '/tasks', label: t('nav.tasks'), id: 'tasks', show: true },
    { to: '/workflows', label: t('nav.workflows'), id: 'workflows', show: true },
    { to: '/review', label: t('nav.review'), id: 'review', show: true },
    { to: '/launch', label: t('nav.launch'), id: 'launch', show: true },
    { to: '/import', label: t('nav.import'), id: 'import', show: true },
    { to: '/alerts', label: t('nav.alerts'), id: 'alerts', show: true },
    { to: '/schedules', label: t('nav.schedules'), id: 'schedules', show: true },
    { to: '/types', label: t('nav.types'), id: 'types', show: true },
    { to: '/tenants', label: t('nav.tenants'), id: 'tenants', show: access.admin },
    { to: '/nodes', label: t('nav.nodes'), id: 'nodes', show: true },
    { to: '/audit', label: t('nav.audit'), id: 'audit', show: true },
  ];
  const active = (to: string) => (to === '/' ? path === '/' : path === to || path.startsWith(to + '/'));

  return (
    <div className="app">
      <header className="topbar">
        <Link to="/" className="brand">
          taskgraph
        </Link>
        <nav aria-label={t('nav.menu')} className="nav" data-access={access.known ? (access.platform ? 'platform' : access.admin ? 'admin' : 'none') : ''}>
          {nav
            .filter((n) => n.show)
            .map((n) => (
              <Link key={n.id} to={n.to} className={active(n.to) ? 'active' : ''} aria-current={active(n.to) ? 'page' : undefined} data-testid={`nav-${n.id}`}>
                {n.label}
              </Link>
            ))}
        </nav>
        <div className="topbar-right">
          <span className={`live-dot live-${conn.phase}`} title={conn.phase === 'connected' ? t('conn.live') : t('conn.offline')} data-testid="live-indicator" data-phase={conn.phase}>
            {conn.phase === 'connected' ? t('conn.live') : t('conn.offline')}
          </span>
          <label className="sr-only" htmlFor="lang">
            {t('nav.language')}
          </label>
          <select id="lang" value={lang} onChange={(e) => setLang(e.target.value as Lang)} data-testid="lang-switch" className="lang">
            {LANGS.map((l) => (
              <option key={l} value={l}>
                {l === 'en' ? 'English' : '中文'}
              </option>
            ))}
          </select>
          {signedIn && (
            <button type="button" className="btn btn-ghost btn-small" onClick={signOut} data-testid="sign-out">
              {t('nav.signOut')}
            </button>
          )}
        </div>
      </header>
      <ConnectionBanner />
      <IncidentBanner />
      <main className="main">
        <Routes path={path} platform={access.platform} />
      </main>
    </div>
  );
}

function Routes({ path, platform }: { path: string; platform: boolean }) {
  let m: RegExpExecArray | null;
  if (path === '/' || path === '') return <Dashboard />;
  if (path === '/tasks') return <TaskList />;
  if ((m = /^\/tasks\/([^/]+)$/.exec(path))) return <TaskDetail key={m[1]} id={decodeURIComponent(m[1])} />;
  if (path === '/workflows') return <Workflows />;
  if ((m = /^\/workflows\/([^/]+)$/.exec(path))) return (
      <Suspense fallback={null}>
        <WorkflowDetail key={m[1]} id={decodeURIComponent(m[1])} />
      </Suspense>
    );
  if (path === '/review') return <ReviewQueue />;
  if (path === '/launch') return <Launch type={null} />;
  if ((m = /^\/launch\/([^/]+)$/.exec(path))) return <Launch key={m[1]} type={decodeURIComponent(m[1])} />;
  if (path === '/import') return <ImportPage />;
  if (path === '/alerts') return <AlertsPage />;
  if (path === '/schedules') return <Schedules />;
  if ((m = /^\/schedules\/([^/]+)$/.exec(path))) return <ScheduleDetail key={m[1]} id={decodeURIComponent(m[1])} />;
  if (path === '/types') return <Types />;
  if (path === '/tenants') return <Tenants platform={platform} />;
  if (path === '/nodes') return <Nodes />;
  if (path === '/audit') return <Audit />;
  return <NotFound />;
}

function NotFound() {
  const { t } = useI18n();
  return (
    <section className="card">
      <p>{t('err.NOT_FOUND')}</p>
      <Link to="/">{t('nav.dashboard')}</Link>
    </section>
  );
}
