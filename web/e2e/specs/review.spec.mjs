// The review queue: a webhook task opted into review whose receiver
// answers 400 (a NON_RETRYABLE failure) waits in REVIEW_PENDING; the queue
// shows it live, opens it with its evidence, edits its input (the server's
// validation inline, the diff field by field with the sensitive header
// "changed" and never in clear), retries it; another is rejected with a
// reason, then replayed from its task page with an edited input; a bulk
// reject over the filter after typing the count; an import
// over its failed-rows threshold shows its counts and error report and is
// accepted; the dashboard shows the queue's size and oldest item. (The
// four-eyes refusal's sentence is a component test: no type this server
// can be given has a four-eyes policy.)
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import { markNoReload, noReload } from '../env.mjs';
import { xlsx } from '../xlsx.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Contacts: three good rows, two refused (no name, a malformed e-mail).
const ROWS = [
  ['Name', 'E-mail', 'Phone'],
  ['Ann Example', 'ann@example.com', '13800000001'],
  ['Bob Example', 'bob@example.com', '13800000002'],
  ['', 'nobody@example.com', '13800000003'],
  ['Carl Example', 'not-an-email', '13800000004'],
  ['Dora Example', 'dora@example.com', '13800000005'],
];

// A receiver on loopback: /ok answers 200, anything else 400.
async function receiver() {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(req.url.startsWith('/ok') ? 200 : 400, { 'Content-Type': 'application/json' });
      res.end(req.url.startsWith('/ok') ? '{"ok":true}' : '{"error":"account number refused"}');
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { base: `http://127.0.0.1:${srv.address().port}`, close: () => new Promise((r) => srv.close(r)) };
}

async function gql(env, query, variables) {
  const body = await env.server.gql(query, variables);
  assert.equal(body.errors, undefined, JSON.stringify(body.errors));
  return body.data;
}

// waitStatus reads the task until it is in status (the API, not the page:
// the page is what is under test).
async function waitStatus(env, id, status, timeout = 45_000) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = (await gql(env, 'query($id: ID!) { task(id: $id) { status } }', { id })).task.status;
    if (last === status) return;
    await sleep(200);
  }
  throw new Error(`task ${id} is ${last}, not ${status}`);
}

function row(page, id) {
  return page.locator(`[data-testid="review-row"][data-task-id="${id}"]`);
}

export function register(env) {
  test('review queue: open an item, see the diff, edit and retry, reject with a reason, bulk reject, accept an import', async () => {
    const rcv = await receiver();
    const secretA = 'Bearer e2e-first-secret-7Q';
    const secretB = 'Bearer e2e-second-secret-9Z';
    const page = await env.page();
    try {
      await page.goto(env.url('review?type=webhook'));
      await page.getByTestId('page-review').waitFor();
      await markNoReload(page);

      // Live: the task enters review while the queue is open.
      const a = await env.server.createTask({
        type: 'webhook',
        title: 'e2e review: wrong account',
        maxAttempts: 1,
        review: true,
        input: { url: `${rcv.base}/bad`, headers: { Authorization: secretA } },
      });
      await row(page, a.id).waitFor({ timeout: 45_000 });
      assert.equal(await noReload(page), true, 'the item arrived without a reload');
      await env.shot(page, 'review-queue');

      // Open it: why it waits (the receiver's 400), no diff yet (one input).
      await row(page, a.id).getByTestId('review-open').click();
      const item = page.locator(`[data-testid="review-item"][data-task-id="${a.id}"]`);
      await item.getByTestId('review-current').waitFor();
      assert.equal(await item.getByTestId('review-current').getAttribute('data-trigger'), 'NON_RETRYABLE');
      assert.match(await item.getByTestId('review-reason').textContent(), /400/);
      assert.equal(await item.getByTestId('input-versions').count(), 0);

      // Edit and retry: the server's validation first, shown inline, the text kept.
      await item.getByTestId('decide-EDIT_AND_RETRY').click();
      const editor = item.getByTestId('input-editor');
      const shown = await editor.getByTestId('input-editor-json').inputValue();
      assert.ok(!shown.includes('first-secret'), 'the editor shows the stored (masked) input');
      await editor.getByTestId('input-editor-masked').waitFor();
      const invalid = JSON.stringify({ url: `${rcv.base}/bad`, method: 'GET' }, null, 2);
      await editor.getByTestId('input-editor-json').fill(invalid);
      await editor.getByTestId('input-editor-reason').fill('e2e: use the account from the contract');
      await editor.getByTestId('input-editor-submit').click();
      await editor.getByTestId('input-editor-errors').waitFor();
      assert.ok((await editor.getByTestId('input-editor-problem').count()) > 0);
      assert.equal(await editor.getByTestId('input-editor-json').inputValue(), invalid);
      await env.shot(page, 'review-edit-invalid');
      // A valid edit that still fails: the task comes back to the queue, now with a diff.
      await editor.getByTestId('input-editor-json').fill(JSON.stringify({ url: `${rcv.base}/bad-again`, headers: { Authorization: secretB } }, null, 2));
      await editor.getByTestId('input-editor-submit').click();
      await page.getByTestId('review-decided').waitFor();
      await waitStatus(env, a.id, 'REVIEW_PENDING');
      await row(page, a.id).waitFor({ timeout: 45_000 });
      await row(page, a.id).getByTestId('review-open').click();
      const diff = item.getByTestId('input-diff');
      await diff.waitFor();
      const url = diff.locator('[data-testid="diff-row"][data-path="/url"]');
      assert.equal(await url.getAttribute('data-kind'), 'CHANGED');
      assert.equal(await url.getByTestId('diff-before').textContent(), JSON.stringify(`${rcv.base}/bad`));
      assert.equal(await url.getByTestId('diff-after').textContent(), JSON.stringify(`${rcv.base}/bad-again`));
      const auth = diff.locator('[data-testid="diff-row"][data-path="/headers/Authorization"]');
      assert.equal(await auth.getAttribute('data-masked'), 'true');
      await auth.getByTestId('diff-masked').waitFor();
      const text = await page.locator('body').textContent();
      assert.ok(!text.includes('first-secret') && !text.includes('second-secret'), 'a sensitive value shows in clear');
      await item.getByTestId('review-history').waitFor();
      await env.shot(page, 'review-diff');

      // Now the right address: edit and retry, and the new execution appears on its page.
      await item.getByTestId('decide-EDIT_AND_RETRY').click();
      await item.getByTestId('input-editor-json').fill(JSON.stringify({ url: `${rcv.base}/ok`, headers: { Authorization: secretB } }, null, 2));
      await item.getByTestId('input-editor-reason').fill('e2e: the receiver moved');
      await item.getByTestId('input-editor-submit').click();
      await row(page, a.id).waitFor({ state: 'detached' });
      await page.getByTestId('review-decided-link').click();
      await page.locator(`[data-testid="page-task"][data-task-id="${a.id}"]`).waitFor();
      await page.locator('.task-head [data-testid="status-chip"][data-status="SUCCESS"]').waitFor({ timeout: 45_000 });
      await page.waitForFunction(() => document.querySelectorAll('[data-testid="instance"]').length === 3);
      await page.locator('[data-testid="input-version"][data-version="3"]').waitFor();
      // Its reviews: the last one decided EDITED by the local user, one earlier.
      await page.locator('[data-testid="review-current"][data-decision="EDITED"]').waitFor();
      assert.equal(await page.locator('[data-testid="review-earlier"][data-decision="EDITED"]').count(), 1);
      await env.shot(page, 'review-task-detail');

      // Reject: the reason is required.
      const b = await env.server.createTask({ type: 'webhook', title: 'e2e review: reject me', maxAttempts: 1, review: true, input: { url: `${rcv.base}/bad` } });
      await waitStatus(env, b.id, 'REVIEW_PENDING');
      await page.goto(env.url(`review?type=webhook&open=${b.id}`));
      const itemB = page.locator(`[data-testid="review-item"][data-task-id="${b.id}"]`);
      await itemB.getByTestId('decide-REJECT_REVIEW').click();
      const dialog = page.getByTestId('decision-dialog');
      await dialog.getByTestId('confirm-yes').click();
      await dialog.getByTestId('decision-reason-missing').waitFor();
      await dialog.getByTestId('decision-reason').fill('e2e: the order was withdrawn');
      await dialog.getByTestId('confirm-yes').click();
      await row(page, b.id).waitFor({ state: 'detached' });
      const rejected = await gql(env, 'query($id: ID!) { task(id: $id) { status review { decision decisionReason decidedBy } } }', { id: b.id });
      assert.equal(rejected.task.status, 'FAILED');
      assert.equal(rejected.task.review.decision, 'REJECTED');
      assert.equal(rejected.task.review.decisionReason, 'e2e: the order was withdrawn');

      // FAILED now: its page offers a replay with an edited input, kept as a new version.
      await page.goto(env.url(`tasks/${b.id}`));
      await page.getByTestId('decide-REPLAY_WITH_INPUT').click();
      await page.getByTestId('input-editor-json').fill(JSON.stringify({ url: `${rcv.base}/ok` }));
      await page.getByTestId('input-editor-reason').fill('e2e: the order came back');
      await page.getByTestId('input-editor-submit').click();
      await page.locator('.task-head [data-testid="status-chip"][data-status="SUCCESS"]').waitFor({ timeout: 45_000 });
      await page.locator('[data-testid="input-version"][data-version="2"] [data-testid="diff-row"][data-path="/url"]').waitFor();
      await page.locator('[data-testid="review-current"][data-decision="REJECTED"]').waitFor();

      // Bulk reject over the filter, after typing the count.
      const c = await env.server.createTask({ type: 'webhook', title: 'e2e review: bulk 1', maxAttempts: 1, review: true, input: { url: `${rcv.base}/bad` } });
      const d = await env.server.createTask({ type: 'webhook', title: 'e2e review: bulk 2', maxAttempts: 1, review: true, input: { url: `${rcv.base}/bad` } });
      await waitStatus(env, c.id, 'REVIEW_PENDING');
      await waitStatus(env, d.id, 'REVIEW_PENDING');
      await page.goto(env.url('review?type=webhook'));
      await row(page, d.id).waitFor();
      await page.getByTestId('review-bulk-reject').click();
      const bulk = page.getByTestId('review-bulk-dialog');
      await bulk.getByTestId('review-bulk-summary').waitFor();
      assert.equal(await bulk.getByTestId('review-bulk-summary').getAttribute('data-matched'), '2');
      await bulk.getByTestId('review-bulk-typed').fill('2');
      assert.equal(await bulk.getByTestId('confirm-yes').isDisabled(), true, 'a reject needs its reason');
      await bulk.getByTestId('review-bulk-reason').fill('e2e: sweep');
      await bulk.getByTestId('confirm-yes').click();
      await page.locator('[data-testid="review-bulk-result"][data-ok="2"][data-failed="0"]').waitFor();
      await page.getByTestId('review-empty').waitFor();
      for (const t of [c, d]) await waitStatus(env, t.id, 'FAILED');

      // An import over its failed-rows threshold waits for review: its
      // counts and its error report are the evidence; accepted as it is.
      await page.goto(env.url('import'));
      const bytes = xlsx(ROWS).toString('base64');
      const dataTransfer = await page.evaluateHandle((b64) => {
        const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bin], 'contacts-review.xlsx', { type: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet' }));
        return dt;
      }, bytes);
      await page.getByTestId('dropzone').dispatchEvent('drop', { dataTransfer });
      await page.getByTestId('import-file-name').getByText('contacts-review.xlsx').waitFor();
      await page.getByTestId('import-target').selectOption('contacts');
      await page.getByTestId('import-options').fill('{"maxFailedRows": 1}');
      await page.getByTestId('import-submit').click();
      await page.waitForURL(/\/console\/tasks\/\d+$/);
      const importId = page.url().split('/').pop();
      await waitStatus(env, importId, 'REVIEW_PENDING', 60_000);
      await page.goto(env.url(`review?open=${importId}`));
      const itemI = page.locator(`[data-testid="review-item"][data-task-id="${importId}"]`);
      await itemI.locator('[data-testid="review-current"][data-trigger="NEEDS_REVIEW"]').waitFor();
      assert.equal(await itemI.getByTestId('evidence-failedCount').textContent(), '2');
      assert.equal(await itemI.getByTestId('evidence-totalCount').textContent(), '5');
      const [download] = await Promise.all([page.waitForEvent('download'), itemI.getByTestId('review-download-report').click()]);
      assert.ok(readFileSync(await download.path()).length > 0, 'the error report is empty');
      await env.shot(page, 'review-import');
      await itemI.getByTestId('decide-ACCEPT_REVIEW').click();
      await page.getByTestId('decision-dialog').getByTestId('confirm-yes').click();
      await row(page, importId).waitFor({ state: 'detached' });
      await waitStatus(env, importId, 'SUCCESS');

      // The dashboard: the queue's size and its oldest item (alone in it).
      const oldest = await env.server.createTask({ type: 'webhook', title: 'e2e review: oldest', maxAttempts: 1, review: true, input: { url: `${rcv.base}/bad` } });
      await waitStatus(env, oldest.id, 'REVIEW_PENDING');
      await page.goto(env.url(''));
      await page.locator('[data-testid="dash-review"][data-size="1"]').waitFor();
      assert.match(await page.getByTestId('dash-review-oldest').textContent(), new RegExp(oldest.code));
      await page.getByTestId('dash-review-oldest').locator('a').click();
      await page.locator(`[data-testid="review-item"][data-task-id="${oldest.id}"]`).waitFor();

      // On a phone: the queue and an open item fit the screen.
      await page.setViewportSize({ width: 390, height: 844 });
      await page.waitForTimeout(300);
      assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1), true, 'the review queue scrolls sideways on a phone');
      await env.shot(page, 'phone-review');
      await page.setViewportSize({ width: 1366, height: 900 });

      // In Chinese too.
      await page.getByTestId('lang-switch').selectOption('zh');
      await page.getByText('人工复核队列').first().waitFor();
      await env.shot(page, 'review-queue-zh');
      await page.getByTestId('lang-switch').selectOption('en');
    } catch (e) {
      await env.shot(page, 'review-failure').catch(() => {});
      throw e;
    } finally {
      await page.close();
      await rcv.close();
    }
  });
}
