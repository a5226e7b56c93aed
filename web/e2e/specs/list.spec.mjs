import assert from 'node:assert/strict';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

const row = (page, code) => page.locator(`[data-testid="task-row"][data-code="${code}"]`);
const rowStatus = (page, code, status) => page.locator(`[data-testid="task-row"][data-code="${code}"] [data-testid="status-chip"][data-status="${status}"]`);

export function register(env) {
  test('task list: a new task appears and its chip turns to SUCCESS live', async () => {
    const page = await env.page();
    await page.goto(env.url('tasks'));
    await page.getByTestId('task-table').waitFor();
    await page.locator('[data-testid="live-indicator"][data-phase="connected"]').waitFor();
    await markNoReload(page);
    const task = await env.server.createTask({ type: 'noop', title: 'e2e list live', input: { sleepMs: 1500 } });
    await row(page, task.code).waitFor();
    await rowStatus(page, task.code, 'SUCCESS').waitFor({ timeout: 45_000 });
    assert.equal(await noReload(page), true);
    await env.shot(page, 'task-list');
    await page.close();
  });

  test('task list: filters by text and status, and the URL keeps the filter', async () => {
    const a = await env.server.createTask({ type: 'noop', title: 'e2e filter alpha', bizId: 'ORDER-4711' });
    const page = await env.page();
    await page.goto(env.url('tasks'));
    await page.getByTestId('task-row').first().waitFor();
    await page.getByTestId('filter-search').fill('ORDER-4711');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="task-row"]').length === 1);
    await row(page, a.code).waitFor();
    assert.match(page.url(), /q=ORDER-4711/);
    await page.getByTestId('filter-status-FAILED').click();
    await page.getByTestId('list-empty').waitFor();
    await page.reload();
    assert.equal(await page.getByTestId('filter-search').inputValue(), 'ORDER-4711');
    assert.equal(await page.getByTestId('filter-status-FAILED').getAttribute('aria-pressed'), 'true');
    await page.getByTestId('filter-clear').click();
    await page.getByTestId('task-row').first().waitFor();
    await page.close();
  });

  test('task list: bulk cancel of the selection', async () => {
    const later = new Date(Date.now() + 3600_000).toISOString();
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await env.server.createTask({ type: 'noop', title: `e2e bulk ${i}`, bizId: 'BULK-E2E', runAt: later }));
    const page = await env.page();
    await page.goto(env.url('tasks?q=BULK-E2E'));
    for (const t of made) await rowStatus(page, t.code, 'PENDING').waitFor();
    await page.getByTestId('select-all').check();
    await page.getByTestId('bulk-cancel').click();
    await page.getByTestId('confirm-yes').click();
    for (const t of made) await rowStatus(page, t.code, 'CANCELLED').waitFor();
    assert.match(await page.getByTestId('bulk-result').textContent(), /3 succeeded, 0 failed/);
    await env.shot(page, 'task-list-bulk-cancelled');
    await page.close();
  });

  test('task list: pages with cursors', async () => {
    const page = await env.page();
    await page.goto(env.url('tasks?size=20'));
    const total = await env.server.gql('{ tasks { totalCount } }');
    const n = total.data.tasks.totalCount;
    for (let i = n; i < 22; i++) await env.server.createTask({ type: 'noop', title: `e2e page filler ${i}` });
    await page.reload();
    await page.getByTestId('task-row').first().waitFor();
    const first = await page.getByTestId('task-row').first().getAttribute('data-code');
    await page.getByTestId('page-next').click();
    await page.waitForURL(/after=/);
    await page.waitForFunction((code) => !document.querySelector(`[data-testid="task-row"][data-code="${code}"]`), first);
    assert.match(await page.getByTestId('list-range').textContent(), /^21–/);
    await page.getByTestId('page-prev').click();
    await page.locator(`[data-testid="task-row"][data-code="${first}"]`).waitFor();
    await page.close();
  });
}
