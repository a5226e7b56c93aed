import assert from 'node:assert/strict';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

// The audit trail: filters, links to the tasks, new records live (the
// page polls every few seconds), and the filtered trail exported as CSV.
export function register(env) {
  test('audit trail: filters, task links, live records and CSV export', async () => {
    const a = await env.server.createTask({ type: 'noop', title: 'e2e audit cancelled', runAt: new Date(Date.now() + 3600e3).toISOString() });
    const cancelled = await env.server.gql('mutation($id: ID!) { cancelTask(id: $id) { id status } }', { id: a.id });
    assert.equal(cancelled.errors, undefined, JSON.stringify(cancelled.errors));

    const page = await env.page();
    await page.goto(env.url(''));
    await page.getByTestId('nav-audit').click();
    await page.getByTestId('page-audit').waitFor();
    await page.getByTestId('audit-row').first().waitFor();

    // Filter by action: the cancel, linked to its task.
    await page.getByTestId('audit-action').selectOption('CANCEL');
    await page.waitForFunction(() => {
      const rows = [...document.querySelectorAll('[data-testid="audit-row"]')];
      return rows.length > 0 && rows.every((r) => r.getAttribute('data-action') === 'CANCEL');
    });
    const link = page.locator('[data-testid="audit-row"][data-action="CANCEL"] [data-testid="audit-task-link"]', { hasText: `#${a.id}` });
    await link.first().waitFor();
    await env.shot(page, 'audit');

    // The filtered trail as CSV.
    await page.getByTestId('audit-export').click();
    const download = page.getByTestId('audit-export-link');
    await download.waitFor({ timeout: 45_000 });
    const res = await fetch(await download.getAttribute('href'));
    assert.equal(res.status, 200);
    const csv = (await res.text()).replace(/^\ufeff/, '');
    const lines = csv.trim().split(/\r?\n/);
    assert.match(lines[0], /^ID,Time,Actor,Role,Source,Tenant,Action,Outcome/);
    assert.ok(lines.length >= 2, csv);
    for (const l of lines.slice(1)) assert.match(l, /,CANCEL,/, l);
    assert.ok(lines.some((l) => l.includes(`,${a.id},`) || l.endsWith(`,${a.id}`) || l.includes(`"${a.id}"`)), csv);

    // The link opens the task.
    await link.first().click();
    await page.locator(`[data-testid="page-task"][data-task-id="${a.id}"]`).waitFor();

    // Live: a new record shows on the open first page without a reload.
    await page.goto(env.url('audit'));
    await page.getByTestId('audit-action').selectOption('CREATE');
    await page.locator('[data-testid="audit-row"][data-action="CREATE"]').first().waitFor();
    await markNoReload(page);
    const b = await env.server.createTask({ type: 'noop', title: 'e2e audit live' });
    await page.locator('[data-testid="audit-row"][data-action="CREATE"] [data-testid="audit-task-link"]', { hasText: `#${b.id}` }).first().waitFor({ timeout: 20_000 });
    assert.equal(await noReload(page), true);
    await page.close();
  });
}
