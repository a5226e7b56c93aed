import assert from 'node:assert/strict';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

export function register(env) {
  test('schedules: create one from the page, see its preview, see a task it fired appear live', async () => {
    const page = await env.page();
    await page.goto(env.url('schedules'));
    await page.getByTestId('schedule-new').click();
    await page.getByTestId('sched-name').fill('e2e every ten seconds');
    await page.getByTestId('sched-cron').fill('*/10 * * * * *');
    await page.getByTestId('sched-timezone').fill('Asia/Shanghai');
    await page.getByTestId('sched-overlap').selectOption('ALLOW');
    await page.getByTestId('sched-title').fill('e2e tick');

    // The preview lists the next five slots, ten seconds apart (once it
    // has caught up with the typing). Ten seconds is the server's default
    // floor on how often a schedule may fire (--min-schedule-interval).
    const times = page.getByTestId('schedule-preview-time');
    const spacing = async () => {
      const at = await times.evaluateAll((els) => els.map((e) => Date.parse(e.getAttribute('data-at'))));
      return at.length === 5 && at.every((t, i) => i === 0 || t - at[i - 1] === 10000);
    };
    const deadline = Date.now() + 10_000;
    while (!(await spacing())) {
      assert.ok(Date.now() < deadline, 'the preview never showed five slots ten seconds apart');
      await page.waitForTimeout(100);
    }
    await env.shot(page, 'schedule-form-preview');

    // A bad expression is explained before anything is saved.
    await page.getByTestId('sched-cron').fill('99 * * * *');
    await page.getByTestId('schedule-preview-error').waitFor();
    await page.getByTestId('sched-cron').fill('*/10 * * * * *');
    await times.nth(4).waitFor();

    await markNoReload(page);
    await page.getByTestId('schedule-submit').click();
    await page.waitForURL(/\/console\/schedules\/\d+$/);
    await page.getByTestId('schedule-name').getByText('e2e every ten seconds').waitFor();
    assert.notEqual(await page.getByTestId('schedule-upcoming').textContent(), '—');

    // A task it fires shows up, and runs, without a reload.
    const row = page.getByTestId('schedule-task').first();
    await row.waitFor({ timeout: 20_000 });
    await row.locator('[data-testid="status-chip"][data-status="SUCCESS"]').waitFor({ timeout: 20_000 });
    await page.locator('[data-testid="schedule-log"] li[data-kind="FIRED"]').first().waitFor({ timeout: 10_000 });
    assert.equal(await noReload(page), true, 'the page reloaded');
    await env.shot(page, 'schedule-detail');

    await page.getByTestId('schedule-pause').click();
    await page.getByTestId('schedule-resume').waitFor();
    await page.close();
  });

  test('types: a cap and a pause are set from the page', async () => {
    const page = await env.page();
    await page.goto(env.url('types'));
    const card = page.getByTestId('type-webhook');
    await card.getByTestId('type-cap').fill('3');
    await card.getByTestId('type-save').click();
    await card.getByTestId('type-counts').getByText('cap 0/3').waitFor();
    await card.getByTestId('type-pause').click();
    await card.getByTestId('type-state').getByText('Paused').waitFor();
    await env.shot(page, 'types');
    await card.getByTestId('type-resume').click();
    await card.getByTestId('type-state').getByText('Running').waitFor();
    await page.close();
  });
}
