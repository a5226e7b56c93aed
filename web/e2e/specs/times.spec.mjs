import assert from 'node:assert/strict';
import { test } from 'node:test';

// Times: every date the console shows carries its zone, in the viewer's
// zone and locale (here a viewer in Shanghai whose browser speaks en-US),
// and relative times ("3 s ago") move on their own.
export function register(env) {
  test('times: the viewer\'s zone and locale, named; relative times move', async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e times' });
    const page = await env.page();
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Emulation.setTimezoneOverride', { timezoneId: 'Asia/Shanghai' });
    await cdp.send('Emulation.setLocaleOverride', { locale: 'en-US' });

    await page.goto(env.url(`tasks/${task.id}`));
    await page.locator('[data-testid="page-task"] [data-status="SUCCESS"]').first().waitFor();
    const q = await env.server.gql('query($id: ID!) { task(id: $id) { createdAt } }', { id: task.id });
    const createdAt = q.data.task.createdAt;
    // What the viewer's browser itself says of that instant, with its zone.
    const expected = await page.evaluate(
      (iso) =>
        new Intl.DateTimeFormat(navigator.language, { year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23', timeZoneName: 'short' }).format(new Date(iso)),
      createdAt,
    );
    assert.match(expected, /GMT\+8|CST/, `the browser is in Shanghai: ${expected}`);
    const created = page.locator('.meta div', { has: page.locator('dt', { hasText: /^Created$/ }) }).locator('dd');
    assert.equal(await created.textContent(), expected);
    // en-US: month first.
    const d = new Date(createdAt);
    const shanghai = new Date(d.getTime() + 8 * 3600_000);
    const mm = String(shanghai.getUTCMonth() + 1).padStart(2, '0');
    const dd = String(shanghai.getUTCDate()).padStart(2, '0');
    assert.ok(expected.startsWith(`${mm}/${dd}/`), `${expected}: month/day/year`);
    // The execution's start, in the timeline, too.
    const started = page.locator('.meta.compact div', { has: page.locator('dt', { hasText: /^Started$/ }) }).locator('dd').first();
    assert.match(await started.textContent(), /GMT\+8|CST/);
    await env.shot(page, 'task-times-shanghai');

    // The list's "Created … ago" moves without a reload or an event.
    await page.goto(env.url('tasks'));
    const label = page.locator(`[data-testid="task-row"][data-task-id="${task.id}"] [data-testid="task-created"]`);
    await label.waitFor();
    assert.match(await label.getAttribute('title'), /GMT\+8|CST/);
    const first = await label.textContent();
    assert.match(first, /ago$/);
    await page.waitForFunction(
      ([id, text]) => {
        const el = document.querySelector(`[data-testid="task-row"][data-task-id="${id}"] [data-testid="task-created"]`);
        return el && el.textContent !== text;
      },
      [task.id, first],
      { timeout: 70_000 },
    );
    await page.close();
  });
}
