import assert from 'node:assert/strict';
import { test } from 'node:test';

export function register(env) {
  test('dashboard: counts follow task events live', async () => {
    const page = await env.page();
    await page.goto(env.url(''));
    const success = page.getByTestId('count-SUCCESS');
    await page.waitForFunction(() => document.querySelector('[data-testid="count-SUCCESS"]')?.textContent !== '—');
    const before = Number(await success.getAttribute('data-count'));
    await page.locator('[data-testid="live-indicator"][data-phase="connected"]').waitFor();
    await env.server.createTask({ type: 'noop', title: 'e2e dashboard' });
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid="count-SUCCESS"]')?.getAttribute('data-count')) > n, before, { timeout: 45_000 });
    await page.getByTestId('chart-throughput').waitFor();
    await env.shot(page, 'dashboard');
    await page.close();
  });

  test("dashboard: each tenant's share of the running work", async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e tenant share', input: { sleepMs: 60000 } });
    const page = await env.page();
    await page.goto(env.url(''));
    // The running task is counted, under the empty tenant of a deployment without tenants.
    const row = page.locator('[data-testid="tenant-share-row"][data-tenant=""]');
    await page.waitForFunction(() => Number(document.querySelector('[data-testid="tenant-share-row"][data-tenant=""]')?.getAttribute('data-running')) >= 1, null, { timeout: 45_000 });
    assert.match(await row.textContent(), /\(no tenant\)/);
    const api = await env.server.gql('{ runningByTenant { tenant running } }');
    assert.ok(api.data.runningByTenant.some((r) => r.tenant === '' && r.running >= 1), JSON.stringify(api));
    await env.server.gql('mutation($id: ID!) { cancelTask(id: $id, reason: "e2e: share seen") { id } }', { id: task.id });
    await page.close();
  });

  test('language switch: Chinese labels, remembered after reload', async () => {
    const page = await env.page();
    await page.goto(env.url(''));
    await page.getByTestId('lang-switch').selectOption('zh');
    await page.getByTestId('nav-dashboard').getByText('概览').waitFor();
    await page.reload();
    await page.getByTestId('nav-tasks').getByText('任务').waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh-CN');
    await env.shot(page, 'dashboard-zh');
    await page.goto(env.url('tasks'));
    await page.getByTestId('task-row').first().waitFor();
    await env.shot(page, 'task-list-zh');
    await page.getByTestId('lang-switch').selectOption('en');
    await page.getByTestId('nav-tasks').getByText('Tasks').waitFor();
    await page.close();
  });
}
