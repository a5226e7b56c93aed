import assert from 'node:assert/strict';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

export function register(env) {
  test('launch form: a new task is shown PENDING, then SUCCESS, without reloading', async () => {
    const page = await env.page();
    await page.goto(env.url('launch'));
    await page.getByTestId('launch-type-noop').click();
    // An import starts from a file, on the Import page: no launch form.
    assert.equal(await page.getByTestId('launch-type-import').count(), 0);
    // The policy select says what the empty choice means.
    assert.match(await page.locator('#opt-retryPolicy option').first().textContent(), /^The type's default: none \(1 attempt, no retry\)$/);
    await page.getByTestId('input-sleepMs').fill('1200');
    await page.getByTestId('input-note').fill('from the launch form');
    await page.getByTestId('opt-title').fill('e2e launch');
    // Not before a few seconds from now, so that PENDING is seen for sure.
    const runAt = await page.evaluate(() => {
      const d = new Date(Date.now() + 4000);
      const p = (n) => String(n).padStart(2, '0');
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    });
    await page.getByTestId('opt-runAt').fill(runAt);
    await env.shot(page, 'launch-form');
    await markNoReload(page);
    await page.getByTestId('launch-submit').click();

    await page.waitForURL(/\/console\/tasks\/\d+$/);
    const chip = (status) => page.locator(`.task-head [data-testid="status-chip"][data-status="${status}"]`);
    await chip('PENDING').waitFor();
    await env.shot(page, 'task-detail-pending');
    await chip('EXECUTING').waitFor({ timeout: 45_000 });
    await chip('SUCCESS').waitFor({ timeout: 45_000 });
    assert.equal(await noReload(page), true, 'the page reloaded');
    assert.equal(await page.getByRole('progressbar').first().getAttribute('aria-valuenow'), '100');
    await page.getByTestId('task-result').getByText('from the launch form').waitFor();
    assert.equal(await page.getByTestId('instance').count(), 1);
    await env.shot(page, 'task-detail-success');
    await page.close();
  });

  test('launch: an import is launched from the Import page', async () => {
    const page = await env.page();
    await page.goto(env.url('launch/import'));
    await page.getByTestId('launch-use-import').getByRole('link').click();
    await page.getByTestId('page-import').waitFor();
    await page.close();
  });

  test('launch form: server validation errors are shown on the form', async () => {
    const page = await env.page();
    await page.goto(env.url('launch/webhook'));
    await page.getByTestId('input-url').fill('http://127.0.0.1:1/');
    await page.getByTestId('opt-maxAttempts').fill('99');
    await page.getByTestId('launch-submit').click();
    const err = page.getByTestId('error');
    await err.waitFor();
    assert.equal(await err.getAttribute('data-code'), 'VALIDATION');
    assert.match(page.url(), /\/launch\/webhook$/);
    await env.shot(page, 'launch-validation-error');
    await page.close();
  });
}
