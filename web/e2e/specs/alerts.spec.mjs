import assert from 'node:assert/strict';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

// Alerts: a channel and a rule made in the console, then a failing task:
// the incident banner appears live on the open page (no reload), and the
// incidents page links to the task.
export function register(env) {
  test('an incident appears live in the banner and on the alerts page', async () => {
    const page = await env.page();
    await page.goto(env.url('alerts?tab=channels'));
    await page.getByTestId('channel-name').fill('e2e ops hook');
    await page.getByTestId('channel-kind').selectOption('WEBHOOK');
    await page.getByTestId('channel-url').fill('http://127.0.0.1:1/e2e-hook?token=abc');
    await page.getByTestId('channel-secret').fill('e2e-secret');
    await page.getByTestId('channel-save').click();
    const channel = page.getByTestId('channel').filter({ hasText: 'e2e ops hook' });
    await channel.waitFor();
    assert.doesNotMatch(await channel.textContent(), /token=abc/, 'the token in the URL is not shown');
    await env.shot(page, 'alerts-channels');

    await page.getByTestId('alerts-tab-rules').click();
    await page.getByTestId('rule-name').fill('e2e pushes fail');
    await page.getByTestId('rule-kind').selectOption('TASK_FAILED');
    await page.getByTestId('rule-type').selectOption('webhook');
    await page.getByTestId('rule-form').getByLabel('e2e ops hook').check();
    await page.getByTestId('rule-save').click();
    await page.locator('[data-testid="rule"][data-rule-name="e2e pushes fail"]').waitFor();
    await env.shot(page, 'alerts-rules');

    // Any page shows the banner; none is up yet.
    await page.getByTestId('nav-tasks').click();
    await page.getByTestId('page-tasks').waitFor();
    assert.equal(await page.getByTestId('incident-banner').count(), 0);
    await markNoReload(page);

    const task = await env.server.createTask({ type: 'webhook', title: 'e2e alerting push', maxAttempts: 1, input: { url: 'http://127.0.0.1:1/' } });
    const banner = page.getByTestId('incident-banner');
    await banner.waitFor({ timeout: 20_000 });
    assert.match(await banner.textContent(), /e2e pushes fail/);
    assert.ok(await noReload(page), 'the banner came live, without a reload');
    await env.shot(page, 'alerts-banner');

    await page.getByTestId('incident-banner-link').click();
    const incident = page.getByTestId('incident').filter({ hasText: 'e2e pushes fail' });
    await incident.waitFor();
    assert.equal(await incident.getAttribute('data-status'), 'OPEN');
    assert.match(await incident.getByTestId('incident-summary').textContent(), /FAILED/);
    // Its notice is a delivery task (failing here: nothing listens).
    await incident.getByTestId('deliveries').waitFor({ timeout: 20_000 });
    await env.shot(page, 'alerts-incidents');
    await incident.getByTestId('incident-task').click();
    await page.locator(`[data-testid="page-task"][data-task-id="${task.id}"]`).waitFor();

    // Resolving it by hand takes the banner down, live.
    await page.goto(env.url('alerts'));
    await page.getByTestId('incident').filter({ hasText: 'e2e pushes fail' }).getByTestId('resolve-incident').click();
    await page.getByTestId('incident-banner').waitFor({ state: 'detached', timeout: 20_000 });
    await page.close();
  });
}
