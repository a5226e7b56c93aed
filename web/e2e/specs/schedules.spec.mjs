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

  test('schedules: a workflow schedule created from the form, run now, its workflow listed and opened', async () => {
    const page = await env.page();
    await page.goto(env.url('schedules'));
    await page.getByTestId('schedule-new').click();
    await page.getByTestId('sched-name').fill('e2e workflow hourly');
    // An hour apart: nothing fires by itself while the spec runs.
    await page.getByTestId('sched-mode').selectOption('interval');
    await page.getByTestId('sched-interval').fill('3600');
    await page.getByTestId('sched-creates').selectOption('workflow');
    await page.getByTestId('sched-wfTitle').fill('e2e scheduled pair');
    await page.getByTestId('sched-wfPolicy').selectOption('WAIT');
    const editor = page.getByTestId('sched-wfSteps');
    // Prefilled with a valid example, of a registered type.
    const example = JSON.parse(await editor.inputValue());
    assert.equal(example.length, 2);
    assert.deepEqual(example[1].dependsOn, [example[0].key]);

    // A syntax error is caught here; the server's problems land at the field.
    await editor.fill('[{"key": "a",}]');
    await page.getByTestId('schedule-submit').click();
    await page.getByTestId('sched-wfSteps-error').waitFor();
    await editor.fill(JSON.stringify([{ key: 'a', type: 'noop' }, { key: 'b', type: 'noop', dependsOn: ['nope'] }]));
    await page.getByTestId('schedule-submit').click();
    await page.getByTestId('sched-wfSteps-problems').getByText('steps[1].dependsOn').waitFor();
    assert.match(page.url(), /\/console\/schedules$/);

    await editor.fill(JSON.stringify([{ key: 'a', type: 'noop' }, { key: 'b', type: 'noop', dependsOn: ['a'] }]));
    await page.getByTestId('schedule-submit').click();
    await page.waitForURL(/\/console\/schedules\/\d+$/);
    await page.getByTestId('schedule-name').getByText('e2e workflow hourly').waitFor();
    assert.deepEqual(
      await page.getByTestId('schedule-wf-step').evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent))),
      [
        ['a', 'noop', '—'],
        ['b', 'noop', 'a'],
      ],
    );
    assert.equal(await page.getByTestId('schedule-workflow-row').count(), 0);

    await markNoReload(page);
    await page.getByTestId('schedule-run-now').click();
    await page.getByTestId('schedule-run-created').waitFor();
    const row = page.getByTestId('schedule-workflow-row').first();
    await row.waitFor({ timeout: 10_000 });
    // Its status goes live to SUCCESS (both noop steps), without a reload.
    await row.locator('[data-testid="status-chip"][data-status="SUCCESS"]').waitFor({ timeout: 30_000 });
    assert.equal(await noReload(page), true, 'the page reloaded');
    assert.equal(await page.getByTestId('error').count(), 0);
    await env.shot(page, 'schedule-workflow-detail');

    const id = await row.getAttribute('data-workflow-id');
    await row.locator('a').click();
    await page.waitForURL(new RegExp(`/console/workflows/${id}$`));
    await page.locator(`[data-testid="page-workflow"][data-workflow-id="${id}"]`).waitFor();
    await page.getByTestId('wf-node').nth(1).waitFor();

    // The list says what it creates.
    await page.goto(env.url('schedules'));
    await page.getByTestId('schedule-row').filter({ hasText: 'e2e workflow hourly' }).getByTestId('schedule-what').getByText('e2e scheduled pair · workflow (2 steps)').waitFor();
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
