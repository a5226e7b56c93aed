import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { xlsx } from '../xlsx.mjs';

// Contacts: three good rows and two the importer must reject (no name, a
// malformed e-mail), so the import ends PARTIAL_SUCCESS with a report.
const ROWS = [
  ['Name', 'E-mail', 'Phone'],
  ['Ann Example', 'ann@example.com', '13800000001'],
  ['Bob Example', 'bob@example.com', '13800000002'],
  ['', 'nobody@example.com', '13800000003'],
  ['Carl Example', 'not-an-email', '13800000004'],
  ['Dora Example', 'dora@example.com', '13800000005'],
];

export function register(env) {
  test('import: drop an xlsx, see PARTIAL_SUCCESS live, download the error report', async () => {
    const page = await env.page();
    await page.goto(env.url('import'));
    const bytes = xlsx(ROWS).toString('base64');
    // A real drop: a DataTransfer with the file, dispatched on the zone.
    const dataTransfer = await page.evaluateHandle((b64) => {
      const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bin], 'contacts-e2e.xlsx', { type: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet' }));
      return dt;
    }, bytes);
    await page.getByTestId('dropzone').dispatchEvent('dragover', { dataTransfer });
    await page.getByTestId('dropzone').dispatchEvent('drop', { dataTransfer });
    await page.getByTestId('import-file-name').getByText('contacts-e2e.xlsx').waitFor();
    // The target is picked from the server's list, not typed.
    assert.equal(await page.getByTestId('import-target').evaluate((el) => el.tagName), 'SELECT');
    await page.getByTestId('import-target').selectOption('contacts');
    await env.shot(page, 'import-ready');
    await page.getByTestId('import-submit').click();

    await page.waitForURL(/\/console\/tasks\/\d+$/);
    await page.locator('[data-testid="result-status"][data-status="PARTIAL_SUCCESS"]').waitFor({ timeout: 60_000 });
    assert.equal(await page.getByTestId('import-total').textContent(), '5');
    assert.equal(await page.getByTestId('import-failed').textContent(), '2');
    await env.shot(page, 'import-partial-success');

    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-ERROR_REPORT').click()]);
    const file = await download.path();
    const body = readFileSync(file);
    assert.ok(body.length > 0, 'the error report is empty');
    await page.close();
  });
}
