import assert from 'node:assert/strict';
import { test } from 'node:test';

function headChip(page) {
  return page.getByTestId('page-task').locator('.task-head [data-testid="status-chip"]');
}

async function waitStatus(page, status, timeout = 45_000) {
  await page.locator(`.task-head [data-testid="status-chip"][data-status="${status}"]`).waitFor({ timeout });
}

export function register(env) {
  test('cancel a running task', async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e long runner', input: { sleepMs: 60000 } });
    const page = await env.page();
    await page.goto(env.url(`tasks/${task.id}`));
    await waitStatus(page, 'EXECUTING');
    const actions = page.locator('.task-head [data-testid="task-actions"]');
    assert.equal(await actions.getByTestId('action-retry').count(), 0);
    await page.getByRole('progressbar').first().waitFor();
    await env.shot(page, 'task-detail-executing');
    await actions.getByTestId('action-cancel').click();
    await page.getByTestId('cancel-reason').fill('e2e: no longer needed');
    await page.getByTestId('confirm-yes').click();
    await waitStatus(page, 'CANCELLED', 45_000);
    assert.equal(await actions.locator('button').count(), 0, 'a cancelled task offers no action');
    await page.getByText('e2e: no longer needed', { exact: true }).waitFor();
    await page.getByTestId('log').getByText(/cancelled while running/).waitFor();
    await env.shot(page, 'task-detail-cancelled');
    await page.close();
  });

  test('a FAILED task shows a Retry button, and retrying keeps the failed execution', async () => {
    const task = await env.server.createTask({ type: 'webhook', title: 'e2e refused webhook', maxAttempts: 1, input: { url: 'http://127.0.0.1:1/' } });
    const page = await env.page();
    await page.goto(env.url(`tasks/${task.id}`));
    await waitStatus(page, 'FAILED');
    const actions = page.locator('.task-head [data-testid="task-actions"]');
    await actions.getByTestId('action-retry').waitFor();
    assert.equal(await actions.getByTestId('action-cancel').count(), 0);
    await page.getByTestId('task-last-error').waitFor();
    assert.match(await page.getByTestId('instances').textContent(), /RETRYABLE/);
    await env.shot(page, 'task-detail-failed');

    await actions.getByTestId('action-retry').click();
    await page.getByTestId('instance').nth(1).waitFor();
    await waitStatus(page, 'FAILED');
    assert.equal(await page.getByTestId('instance').count(), 2);
    // The newest execution says that a person started it.
    await page.getByTestId('instance').first().getByTestId('manual-retry').waitFor();
    assert.equal(await page.getByTestId('manual-retry').count(), 1);
    await page.close();
  });

  test('a SUCCESS task shows no action button', async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e quick' });
    const page = await env.page();
    await page.goto(env.url(`tasks/${task.id}`));
    await waitStatus(page, 'SUCCESS');
    assert.equal(await page.locator('.task-head [data-testid="task-actions"] button').count(), 0);
    // noop reports no result: a success says so, not "No result yet".
    assert.equal(await page.getByTestId('no-result').textContent(), 'Succeeded. This task type reports no result.');
    assert.equal(await headChip(page).count(), 1);
    await page.close();
  });

  test('an unknown task says so', async () => {
    const page = await env.page();
    await page.goto(env.url('tasks/999999'));
    const err = page.getByTestId('error');
    await err.waitFor();
    assert.equal(await err.getAttribute('data-code'), 'NOT_FOUND');
    await page.close();
  });
}
