import assert from 'node:assert/strict';
import { test } from 'node:test';

// Bulk actions over the list's filter: the dialog shows the
// preview count, the confirm button waits for that number to be typed, and
// the console opens the bulk task, which cancels every matching task.
export function register(env) {
  test('task list: cancel all matching tasks after confirming their number', async () => {
    const tag = `e2e-sweep-${Date.now()}`;
    const later = new Date(Date.now() + 3600_000).toISOString();
    const created = [];
    for (let i = 0; i < 3; i++) created.push(await env.server.createTask({ type: 'noop', title: `${tag} ${i}`, runAt: later }));
    const page = await env.page();
    await page.goto(env.url(`tasks?q=${tag}`));
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="task-row"]').length === 3);

    await page.getByTestId('bulk-filter-cancel').click();
    const dialog = page.getByTestId('bulk-filter-dialog');
    await dialog.getByTestId('bulk-filter-summary').waitFor();
    assert.equal(await dialog.getByTestId('bulk-filter-summary').getAttribute('data-matched'), '3');
    const yes = dialog.getByTestId('confirm-yes');
    assert.equal(await yes.isDisabled(), true, 'nothing happens before the number is typed');
    await dialog.getByTestId('bulk-filter-typed').fill('2');
    assert.equal(await yes.isDisabled(), true, 'a wrong number does not confirm');
    await dialog.getByTestId('bulk-filter-typed').fill('3');
    await dialog.getByTestId('bulk-filter-reason').fill('e2e: sweep');
    await env.shot(page, 'bulk-filter-confirm');
    await yes.click();

    // The bulk task's page, where it runs to SUCCESS.
    await page.waitForURL(/\/tasks\/\d+$/);
    await page.locator('.task-head [data-testid="status-chip"][data-status="SUCCESS"]').waitFor({ timeout: 45_000 });
    for (const t of created) {
      const body = await env.server.gql('query($id: ID!) { task(id: $id) { status cancelReason } }', { id: t.id });
      assert.equal(body.data.task.status, 'CANCELLED');
      assert.equal(body.data.task.cancelReason, 'e2e: sweep');
    }

    // Previewed again, the filter now meets only cancelled tasks: a retry refuses them.
    await page.goto(env.url(`tasks?q=${tag}`));
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="task-row"]').length === 3);
    await page.getByTestId('bulk-filter-retry').click();
    await page.getByTestId('bulk-filter-dialog').locator('[data-status="CANCELLED"][data-accepted="false"]').waitFor();
    await page.getByTestId('confirm-no').click();
    await page.close();
  });
}
