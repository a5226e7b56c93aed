import assert from 'node:assert/strict';
import { test } from 'node:test';

// Page loads: every page of the console loads without one failed request
// (no 4xx or 5xx answer: the console sends no probe that the API refuses)
// and without an error in the browser's console. A task's Files card shows
// the loading state while the task loads, then its files or that it has
// none, never "none" first.
export function register(env) {
  test('page loads: no failed request and no console error on any page', async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e page loads' });
    const pages = [
      ['', 'page-dashboard'],
      ['tasks', 'page-tasks'],
      [`tasks/${task.id}`, 'page-task'],
      ['launch', 'page-launch'],
      ['import', 'page-import'],
      ['alerts', 'page-alerts'],
      ['schedules', 'page-schedules'],
      ['types', 'page-types'],
      ['tenants', 'page-tenants'],
      ['nodes', 'page-nodes'],
      ['audit', 'page-audit'],
    ];
    for (const [path, testId] of pages) {
      const page = await env.page();
      const failed = [];
      const errors = [];
      page.on('response', (r) => {
        if (r.status() >= 400) failed.push(`${r.status()} ${r.request().method()} ${r.url()} ${r.request().postData() ?? ''}`.slice(0, 300));
      });
      page.on('requestfailed', (r) => failed.push(`failed ${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      await page.goto(env.url(path));
      await page.getByTestId(testId).first().waitFor();
      // Every HTTP request the page starts on load has been answered (the
      // websocket of the subscriptions is not one).
      await page.waitForLoadState('networkidle');
      assert.deepEqual(failed, [], `/${path}: failed requests`);
      assert.deepEqual(errors, [], `/${path}: console errors`);
      await page.close();
    }
  });

  test('files card: loading, then the files or none, never none first', async () => {
    const bytes = Buffer.from('Name,E-mail\nAnn Example,ann@example.com\n');
    const form = new FormData();
    form.append('operations', JSON.stringify({ query: 'mutation($file: Upload!) { importFile(file: $file, target: "contacts") { id } }', variables: { file: null } }));
    form.append('map', JSON.stringify({ 0: ['variables.file'] }));
    form.append('0', new Blob([bytes], { type: 'text/csv' }), 'files-card.csv');
    const res = await fetch(`${env.server.url}/query`, { method: 'POST', body: form, headers: { 'Apollo-Require-Preflight': 'true' } });
    const body = await res.json();
    assert.equal(body.errors, undefined, JSON.stringify(body.errors));
    const importId = body.data.importFile.id;
    const plain = await env.server.createTask({ type: 'noop', title: 'e2e no files' });

    const page = await env.page();
    // The task's query is held back a while, so that the download buttons
    // wait for the task; the page records whether the loading state and
    // the empty text ever showed.
    await page.route('**/query', async (route) => {
      // Queries go as GET within the URL's limit, else as POST.
      const req = route.request();
      const op = new URL(req.url()).searchParams.get('operationName') ?? (req.postDataJSON?.() ?? {}).operationName;
      if (op === 'Task') await new Promise((r) => setTimeout(r, 1500));
      await route.continue();
    });
    await page.addInitScript(() => {
      window.__sawNoFiles = false;
      window.__sawLoading = false;
      new MutationObserver(() => {
        if (document.querySelector('[data-testid="task-loading"]')) window.__sawLoading = true;
        if (document.querySelector('[data-testid="artifacts"]')?.textContent?.includes('No files')) window.__sawNoFiles = true;
      }).observe(document, { childList: true, subtree: true });
    });
    await page.goto(env.url(`tasks/${importId}`));
    await page.getByTestId('download-SOURCE').waitFor();
    // The loading state showed first (however briefly: the subscription's
    // first message may bring the task before the held-back query).
    assert.equal(await page.evaluate(() => window.__sawLoading), true, 'the task page showed its loading state');
    assert.equal(await page.evaluate(() => window.__sawNoFiles), false, 'an import task never said it has no files');
    await env.shot(page, 'task-files');

    await page.goto(env.url(`tasks/${plain.id}`));
    await page.locator('[data-testid="artifacts"][data-state="empty"]').waitFor();
    assert.equal(await page.getByTestId('download-SOURCE').count(), 0);
    await page.close();
  });
}
