import assert from 'node:assert/strict';
import { test } from 'node:test';

const row = (page, code) => page.locator(`[data-testid="task-row"][data-code="${code}"]`);
const rowCount = (page, n) => page.waitForFunction((n) => document.querySelectorAll('[data-testid="task-row"]').length === n, n, { timeout: 20_000 });

// The payload filter of the task list: conditions on a path of the tasks'
// input or result, the selected type's input schema suggesting the paths,
// kept in the URL.
export function register(env) {
  test('task list: filters by a path of the input and of the result', async () => {
    const tag = `e2e-pl-${Date.now().toString(36)}`;
    const alpha = await env.server.createTask({ type: 'noop', title: 'e2e payload alpha', input: { note: `${tag}-alpha` } });
    const beta = await env.server.createTask({ type: 'noop', title: 'e2e payload beta', input: { note: `${tag}-beta` } });
    const page = await env.page();
    await page.goto(env.url('tasks?type=noop'));
    await page.getByTestId('task-row').first().waitFor();

    // The noop type's input schema suggests its paths.
    const suggested = await page.getByTestId('payload-paths').locator('option').evaluateAll((os) => os.map((o) => o.value));
    assert.deepEqual(suggested.sort(), ['note', 'sleepMs']);

    await page.getByTestId('payload-path').fill('note');
    await page.getByTestId('payload-op').selectOption('eq');
    await page.getByTestId('payload-value').fill(`${tag}-alpha`);
    await page.getByTestId('payload-add').click();
    await rowCount(page, 1);
    await row(page, alpha.code).waitFor();
    assert.match(decodeURIComponent(page.url()), /payload=\[.*"path":"note"/);
    await env.shot(page, 'task-list-payload-filter');

    // The URL keeps it.
    await page.reload();
    await row(page, alpha.code).waitFor();
    assert.equal(await page.getByTestId('payload-cond').count(), 1);

    // A prefix finds both; then a condition on the result narrows again.
    await page.getByTestId('payload-remove').click();
    await page.getByTestId('payload-path').fill('note');
    await page.getByTestId('payload-op').selectOption('prefix');
    await page.getByTestId('payload-value').fill(tag);
    await page.getByTestId('payload-add').click();
    await rowCount(page, 2);
    await row(page, beta.code).waitFor();
    await page.getByTestId('payload-on').selectOption('result');
    await page.getByTestId('payload-path').fill('note');
    await page.getByTestId('payload-op').selectOption('eq');
    await page.getByTestId('payload-value').fill(`${tag}-beta`);
    await page.getByTestId('payload-add').click();
    await rowCount(page, 1);
    await row(page, beta.code).waitFor();

    // A bad path is refused before it is sent.
    await page.getByTestId('payload-path').fill('note field');
    await page.getByTestId('payload-bad-path').waitFor();
    assert.equal(await page.getByTestId('payload-add').isDisabled(), true);

    // Clear drops the conditions with the other filters.
    await page.getByTestId('filter-clear').click();
    await page.waitForFunction(() => !location.search.includes('payload'));
    assert.equal(await page.getByTestId('payload-cond').count(), 0);
    await page.close();
  });
}
