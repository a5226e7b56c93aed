import { test } from 'node:test';

export function register(env) {
  test('connection lost: banner, then reconnect and refresh', async () => {
    const page = await env.page();
    await page.goto(env.url('tasks'));
    await page.locator('[data-testid="live-indicator"][data-phase="connected"]').waitFor();

    await env.server.stop();
    await page.getByTestId('connection-lost').waitFor({ timeout: 45_000 });
    await env.shot(page, 'connection-lost');

    await env.server.start();
    await page.getByRole('button', { name: /Retry now/ }).click().catch(() => {});
    await page.getByTestId('connection-lost').waitFor({ state: 'detached', timeout: 40_000 });
    await page.locator('[data-testid="live-indicator"][data-phase="connected"]').waitFor();

    // Subscriptions are live again: a task made now shows up by itself.
    const task = await env.server.createTask({ type: 'noop', title: 'e2e after reconnect' });
    await page.locator(`[data-testid="task-row"][data-code="${task.code}"] [data-status="SUCCESS"]`).waitFor({ timeout: 45_000 });
    await page.close();
  });
}
