// The workflow page: a diamond A → (B, C) → D drawn by dagre, its nodes
// recoloured live as steps finish, a failed step retried from the picture,
// the workflow retried from its head.
//
// B is a webhook to a server of this spec that refuses (400: fails at
// once) until told otherwise, so B fails, and succeeds once retried.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { markNoReload, noReload } from '../env.mjs';

// A hook server: 400 while `refuse` is set, 200 after.
async function hookServer() {
  const state = { refuse: true, hits: 0 };
  const srv = http.createServer((req, res) => {
    state.hits++;
    req.resume();
    res.writeHead(state.refuse ? 400 : 200, { 'Content-Type': 'application/json' });
    res.end('{}');
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { state, url: `http://127.0.0.1:${srv.address().port}/hook`, close: () => new Promise((r) => srv.close(r)) };
}

const CREATE = `mutation($input: CreateWorkflowInput!) { createWorkflow(input: $input) { id code steps { id stepKey } } }`;

function node(page, key) {
  return page.locator(`[data-testid="wf-node"][data-step-key="${key}"]`);
}

async function nodeStatus(page, key, status, timeout = 45_000) {
  await page.locator(`[data-testid="wf-node"][data-step-key="${key}"][data-status="${status}"]`).waitFor({ timeout });
}

export function register(env) {
  test('a diamond workflow: drawn, recoloured live, a failed step retried from the picture', async () => {
    const hook = await hookServer();
    try {
      // A sleeps long enough for the page to see it run; D waits for B
      // (WAIT: a failed parent holds its children until it is retried).
      const body = await env.server.gql(CREATE, {
        input: {
          title: 'e2e diamond',
          onParentFailure: 'WAIT',
          steps: [
            { key: 'a', type: 'noop', input: { sleepMs: 4000 } },
            { key: 'b', type: 'webhook', maxAttempts: 1, input: { url: hook.url }, dependsOn: ['a'] },
            { key: 'c', type: 'noop', dependsOn: ['a'] },
            { key: 'd', type: 'noop', dependsOn: ['b', 'c'] },
          ],
        },
      });
      assert.equal(body.errors, undefined, JSON.stringify(body.errors));
      const wf = body.data.createWorkflow;

      const page = await env.page();
      await page.goto(env.url(`workflows/${wf.id}`));
      const graph = page.getByTestId('workflow-graph');
      await graph.waitFor();
      await markNoReload(page);
      assert.equal(await graph.getAttribute('data-nodes'), '4');
      // Four nodes, the diamond's four edges.
      await page.locator('[data-testid="wf-edge"]').nth(3).waitFor();
      assert.equal(await page.getByTestId('wf-edge').count(), 4);
      // dagre ranks: a above b and c (side by side), above d.
      const box = async (k) => node(page, k).locator('rect').first().boundingBox();
      const [a, b, c, d] = [await box('a'), await box('b'), await box('c'), await box('d')];
      assert.ok(a.y < b.y && b.y === c.y && b.x !== c.x && c.y < d.y, JSON.stringify({ a, b, c, d }));

      // Live: a runs while b, c, d wait; then b fails, c succeeds, d waits.
      await nodeStatus(page, 'a', 'EXECUTING');
      assert.equal(await node(page, 'd').getAttribute('data-status'), 'WAITING_DEPENDENCY');
      await env.shot(page, 'workflow-running');
      await nodeStatus(page, 'a', 'SUCCESS');
      await nodeStatus(page, 'c', 'SUCCESS');
      await nodeStatus(page, 'b', 'FAILED');
      assert.equal(await node(page, 'd').getAttribute('data-status'), 'WAITING_DEPENDENCY');
      await page.locator('[data-testid="workflow-status"][data-status="EXECUTING"], [data-testid="workflow-status"][data-status="FAILED"]').first().waitFor();
      await page.locator('[data-testid="workflow-progress"][data-done="2"]').waitFor();
      await page.locator('[data-testid="failed-step"][data-step-key="b"]').waitFor();
      assert.equal(await node(page, 'a').getByTestId('wf-node-retry').count(), 0, 'a step that succeeded offers no retry');
      await env.shot(page, 'workflow-failed-step');

      // Retry b from its node: it succeeds, which releases d.
      hook.state.refuse = false;
      await node(page, 'b').getByTestId('wf-node-retry').click();
      await nodeStatus(page, 'b', 'SUCCESS');
      await nodeStatus(page, 'd', 'SUCCESS');
      await page.locator('[data-testid="workflow-status"][data-status="SUCCESS"]').waitFor();
      await page.locator('[data-testid="workflow-progress"][data-done="4"][data-total="4"]').waitFor();
      assert.equal(await page.getByTestId('failed-steps').count(), 0);
      assert.equal(await page.getByTestId('workflow-cancel').count(), 0, 'a finished workflow offers no cancel');
      assert.ok(await noReload(page), 'the page was never reloaded');
      assert.equal(hook.state.hits, 2);
      await env.shot(page, 'workflow-done');

      // A node opens its task, which links back to its workflow.
      await node(page, 'd').click();
      await page.getByTestId('page-task').waitFor();
      assert.match(page.url(), new RegExp(`/tasks/${wf.steps.find((s) => s.stepKey === 'd').id}$`));
      await page.getByTestId('task-workflow').getByRole('link', { name: wf.code }).click();
      await page.getByTestId('page-workflow').waitFor();
      await page.close();
    } finally {
      await hook.close();
    }
  });

  test('retry the workflow from its page: the failed step and the one it cancelled run again, the others are kept', async () => {
    const hook = await hookServer();
    try {
      // CANCEL_DEPENDENTS (the default): b fails, d is cancelled, the
      // workflow ends FAILED.
      const body = await env.server.gql(CREATE, {
        input: {
          title: 'e2e retry the workflow',
          steps: [
            { key: 'a', type: 'noop' },
            { key: 'b', type: 'webhook', maxAttempts: 1, input: { url: hook.url }, dependsOn: ['a'] },
            { key: 'c', type: 'noop', dependsOn: ['a'] },
            { key: 'd', type: 'noop', dependsOn: ['b', 'c'] },
          ],
        },
      });
      assert.equal(body.errors, undefined, JSON.stringify(body.errors));
      const wf = body.data.createWorkflow;
      const page = await env.page();
      await page.goto(env.url(`workflows/${wf.id}`));
      await markNoReload(page);
      await nodeStatus(page, 'b', 'FAILED');
      await nodeStatus(page, 'd', 'CANCELLED');
      await page.locator('[data-testid="workflow-status"][data-status="FAILED"]').waitFor();
      await env.shot(page, 'workflow-failed');
      const aTask = await node(page, 'a').getAttribute('data-task-id');

      hook.state.refuse = false;
      await page.getByTestId('workflow-retry').click();
      await page.getByTestId('retry-reason').fill('e2e: receiver fixed');
      await page.getByTestId('confirm-yes').click();
      await nodeStatus(page, 'b', 'SUCCESS');
      await nodeStatus(page, 'd', 'SUCCESS');
      await page.locator('[data-testid="workflow-status"][data-status="SUCCESS"]').waitFor();
      await page.locator('[data-testid="workflow-progress"][data-done="4"][data-total="4"]').waitFor();
      assert.equal(await page.getByTestId('workflow-retry').count(), 0, 'nothing left to re-run');
      assert.ok(await noReload(page), 'the page was never reloaded');
      // a ran once: the retry kept it.
      const a = await env.server.gql('query($id: ID!) { task(id: $id) { instances { id } } }', { id: aTask });
      assert.equal(a.data.task.instances.length, 1);
      assert.equal(hook.state.hits, 2);
      await page.close();
    } finally {
      await hook.close();
    }
  });

  test('cancel a workflow from its page; the list finds it and pages', async () => {
    const body = await env.server.gql(CREATE, {
      input: {
        title: 'e2e to cancel',
        steps: [
          { key: 'slow', type: 'noop', input: { sleepMs: 60000 } },
          { key: 'after', type: 'noop', dependsOn: ['slow'] },
        ],
      },
    });
    assert.equal(body.errors, undefined, JSON.stringify(body.errors));
    const wf = body.data.createWorkflow;
    const page = await env.page();
    await page.goto(env.url(`workflows/${wf.id}`));
    await nodeStatus(page, 'slow', 'EXECUTING');
    await page.getByTestId('workflow-cancel').click();
    await page.getByTestId('cancel-reason').fill('e2e: not needed');
    await page.getByTestId('confirm-yes').click();
    await nodeStatus(page, 'after', 'CANCELLED');
    await nodeStatus(page, 'slow', 'CANCELLED');
    await page.locator('[data-testid="workflow-status"][data-status="CANCELLED"]').waitFor();

    // The list: the filter finds it by its title; paging by 20.
    for (let i = 0; i < 21; i++) {
      const r = await env.server.gql(CREATE, { input: { title: `e2e paging ${i}`, steps: [{ key: 'x', type: 'noop' }] } });
      assert.equal(r.errors, undefined, JSON.stringify(r.errors));
    }
    await page.getByTestId('nav-workflows').click();
    await page.getByTestId('wf-search').fill('to cancel');
    await page.getByTestId('wf-apply').click();
    await page.locator(`[data-testid="workflow-row"][data-workflow-id="${wf.id}"]`).waitFor();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="workflow-row"]').length === 1);
    assert.match(await page.locator('[data-testid="workflow-row"] [data-testid="status-chip"]').getAttribute('data-status'), /CANCELLED/);
    await page.getByTestId('wf-search').fill('e2e paging');
    await page.getByTestId('wf-apply').click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="workflow-row"]').length === 20);
    await page.getByTestId('wf-page-next').click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="workflow-row"]').length === 1);
    assert.match(page.url(), /page=2/);
    await env.shot(page, 'workflows-list');
    await page.close();
  });
}
