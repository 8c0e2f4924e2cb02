/**
 * The Capstan console: sign-in, the layout (skip link, navigation, who is signed in) and the
 * pages by route. Every page reads the admin API with the sign-in cookie.
 */
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { render } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { MeContext } from './me';
import { ApiError, del, get, post, setSignIn, type Me } from './api';
import { useRoute } from './router';
import { Dashboard } from './pages/dashboard';
import { NodesPage } from './pages/nodes';
import { NodePage } from './pages/node';
import { PendingPage } from './pages/pending';
import { RuleEditPage, RulePage, RulesPage } from './pages/rules';
import { DirectiveEditPage, DirectivePage, DirectivesPage } from './pages/directives';
import { TechniqueEditPage, TechniquePage, TechniquesPage } from './pages/techniques';
import { PropertiesPage, PropertyEditPage } from './pages/properties';
import { GroupEditPage, GroupPage, GroupsPage } from './pages/groups';
import { ChangesPage } from './pages/changes';
import { AuditPage } from './pages/audit';
import { ChangeRequestPage, ChangeRequestsPage } from './pages/reviews';
import { JobPage, JobsPage } from './pages/jobs';
import { ManagersPage } from './pages/managers';
import { VulnerabilitiesPage } from './pages/vulns';
import { ErrorBox, Loading } from './ui';


function SignIn({ onIn, notice }: { onIn: (me: Me) => void; notice: string | null }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onIn((await post<{ data: Me }>('/console/sign-in', { token })).data);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" class="signin">
      <h1>Capstan</h1>
      <form onSubmit={submit} class="card">
        <h2>Sign in</h2>
        {notice && <p class="notice" role="status">{notice}</p>}
        <label for="token">Admin token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required value={token}
          onInput={(e) => setToken((e.target as HTMLInputElement).value)} />
        <p class="hint">The token in <code>&lt;data-dir&gt;/admin.token</code> on the server, or your own named token.</p>
        <button type="submit" disabled={busy || token === ''}>Sign in</button>
        {error !== null && <ErrorBox error={error} />}
      </form>
    </main>
  );
}

const NAV: Array<[string, string]> = [
  ['/', 'Dashboard'], ['/nodes', 'Nodes'], ['/pending', 'Pending'], ['/rules', 'Rules'], ['/directives', 'Directives'],
  ['/techniques', 'Techniques'], ['/groups', 'Groups'], ['/properties', 'Properties'], ['/change-requests', 'Reviews'], ['/changes', 'Changes'], ['/jobs', 'Jobs'], ['/vulnerabilities', 'Vulnerabilities'], ['/managers', 'Managers'], ['/audit', 'Audit'],
];

function Page() {
  const { path, params } = useRoute();
  const first = useRef(true);
  // After a move, keyboard users land on the new page's content, not back at the top of the
  // navigation; on the first load the skip link stays the first stop. Done in the commit that
  // draws the new page (a layout effect of the component that draws it), so that a field given
  // the focus as soon as it shows keeps it: moved after the next frame, or by another
  // component's later commit, the focus went from that field back to the page.
  useLayoutEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    document.getElementById('main')?.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }, [path]);
  const m = (re: RegExp) => re.exec(path);
  let page;
  let r: RegExpExecArray | null;
  if (path === '/') page = <Dashboard params={params} />;
  else if (path === '/nodes') page = <NodesPage params={params} />;
  else if ((r = m(/^\/nodes\/([^/]+)$/))) page = <NodePage id={decodeURIComponent(r[1]!)} params={params} />;
  else if (path === '/pending') page = <PendingPage params={params} />;
  else if (path === '/rules') page = <RulesPage />;
  else if ((r = m(/^\/rules\/([^/]+)\/edit$/))) page = <RuleEditPage id={r[1] === 'new' ? null : decodeURIComponent(r[1]!)} />;
  else if ((r = m(/^\/rules\/([^/]+)$/))) page = <RulePage id={decodeURIComponent(r[1]!)} params={params} />;
  else if (path === '/directives') page = <DirectivesPage />;
  else if ((r = m(/^\/directives\/([^/]+)\/edit$/))) page = <DirectiveEditPage id={r[1] === 'new' ? null : decodeURIComponent(r[1]!)} technique={params.get('technique')} />;
  else if ((r = m(/^\/directives\/([^/]+)$/))) page = <DirectivePage id={decodeURIComponent(r[1]!)} />;
  else if (path === '/techniques') page = <TechniquesPage />;
  else if ((r = m(/^\/techniques\/([^/]+)\/edit$/))) page = <TechniqueEditPage id={r[1] === 'new' ? null : decodeURIComponent(r[1]!)} />;
  else if ((r = m(/^\/techniques\/([^/]+)$/))) page = <TechniquePage id={decodeURIComponent(r[1]!)} />;
  else if (path === '/properties') page = <PropertiesPage />;
  else if ((r = m(/^\/properties\/([^/]+)\/edit$/))) page = <PropertyEditPage id={r[1] === 'new' ? null : decodeURIComponent(r[1]!)} />;
  else if (path === '/groups') page = <GroupsPage />;
  else if ((r = m(/^\/groups\/([^/]+)\/edit$/))) page = <GroupEditPage id={r[1] === 'new' ? null : decodeURIComponent(r[1]!)} />;
  else if ((r = m(/^\/groups\/([^/]+)$/))) page = <GroupPage id={decodeURIComponent(r[1]!)} params={params} />;
  else if (path === '/changes') page = <ChangesPage params={params} />;
  else if (path === '/audit') page = <AuditPage params={params} />;
  else if (path === '/change-requests') page = <ChangeRequestsPage params={params} />;
  else if ((r = m(/^\/change-requests\/([^/]+)$/))) page = <ChangeRequestPage id={decodeURIComponent(r[1]!)} />;
  else if (path === '/jobs') page = <JobsPage params={params} />;
  else if ((r = m(/^\/jobs\/([^/]+)$/))) page = <JobPage id={decodeURIComponent(r[1]!)} />;
  else if (path === '/managers') page = <ManagersPage />;
  else if (path === '/vulnerabilities') page = <VulnerabilitiesPage params={params} />;
  else page = <><h1>Not found</h1><p>No page at <code>{path}</code>. <a href="#/">Back to the dashboard</a>.</p></>;
  // The page's own key: moving to another node remounts it (no stale data shown under a new title).
  return <main id="main" tabIndex={-1} key={path}>{page}</main>;
}

function Layout({ me, signOut }: { me: Me; signOut: () => void }) {
  const { path } = useRoute();
  const current = (p: string) => (p === '/' ? path === '/' : path === p || path.startsWith(`${p}/`));
  return (
    <MeContext.Provider value={me}>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main')?.focus(); }}>Skip to content</a>
      <header class="top">
        <a class="brand" href="#/">Capstan</a>
        <nav aria-label="Main">
          <ul>
            {NAV.map(([p, label]) => (
              <li key={p}><a href={`#${p}`} aria-current={current(p) ? 'page' : undefined}>{label}</a></li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span title={`signed in until ${new Date(me.expires_at).toLocaleString()}`}>{me.name} <span class={`badge b-role-${me.role}`}>{me.role}</span></span>
          <button type="button" class="link" onClick={signOut}>Sign out</button>
        </div>
      </header>
      <Page />
    </MeContext.Provider>
  );
}

function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const signedIn = (m: Me | null) => {
    setSignIn(m, () => {
      setSignIn(null);
      setNotice('Your sign-in has ended: sign in again.');
      setMe(null);
    });
    setMe(m);
  };
  useEffect(() => {
    get<{ data: Me }>('/console/sign-in').then(
      (r) => signedIn(r.data),
      (err) => (err instanceof ApiError && err.status === 401 ? signedIn(null) : setError(err)),
    );
  }, []);
  const signOut = async () => {
    try {
      await del('/console/sign-in');
    } finally {
      signedIn(null);
      setNotice('Signed out.');
    }
  };
  if (error) return <main id="main"><ErrorBox error={error} /></main>;
  if (me === undefined) return <main id="main"><Loading /></main>;
  if (me === null) return <SignIn onIn={(m) => { setNotice(null); signedIn(m); }} notice={notice} />;
  return <Layout me={me} signOut={signOut} />;
}

render(<App />, document.getElementById('app')!);
