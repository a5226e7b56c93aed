import assert from 'node:assert/strict';
import { test } from 'node:test';

// Nodes: the server's own node is listed live, leading the watchdog, with
// its running execution linked to the task; draining and undraining ask
// for confirmation and show at once.
export function register(env) {
  test('nodes: the node, its execution, drain and undrain', async () => {
    const task = await env.server.createTask({ type: 'noop', title: 'e2e long run on a node', input: { sleepMs: 120000 } });
    const page = await env.page();
    await page.goto(env.url('nodes'));
    await page.getByTestId('page-nodes').waitFor();
    // The running server is the one live node (earlier specs may have
    // restarted it: its former self shows STOPPED).
    const live = page.locator('[data-testid="node"][data-state="LIVE"]');
    await live.first().waitFor();
    assert.equal(await live.count(), 1, 'one live node');
    const id = await live.getAttribute('data-node-id');
    const node = page.locator(`[data-testid="node"][data-node-id="${id}"]`);
    await node.getByTestId('node-leading').waitFor();
    assert.match(await node.getByTestId('node-files').textContent(), /^file:\/\//);
    // The running execution shows (live, at the next refresh, if it had
    // not started yet).
    const exec = node.getByTestId('node-execution').filter({ hasText: `#${task.id}` });
    await exec.waitFor({ timeout: 30_000 });
    // The load comes with the node's next refresh: at least this one busy
    // of the 4 workers the suite's server runs.
    await page.waitForFunction((id) => /^[1-4]\/4/.test(document.querySelector(`[data-node-id="${id}"] [data-testid="node-load"]`)?.textContent ?? ''), id, { timeout: 30_000 });
    await env.shot(page, 'nodes');

    await node.getByTestId('node-drain').click();
    const dialog = page.getByTestId('node-confirm');
    await dialog.waitFor();
    await env.shot(page, 'nodes-drain-confirm');
    await dialog.getByTestId('confirm-yes').click();
    await dialog.waitFor({ state: 'detached' });
    await page.locator(`[data-testid="node"][data-node-id="${id}"][data-state="DRAINING"]`).waitFor();
    await node.getByTestId('node-undrain').click();
    await page.getByTestId('node-confirm').getByTestId('confirm-yes').click();
    await page.locator(`[data-testid="node"][data-node-id="${id}"][data-state="LIVE"]`).waitFor();

    await exec.click();
    await page.locator(`[data-testid="page-task"][data-task-id="${task.id}"]`).waitFor();
    const body = await env.server.gql('mutation($id: ID!) { cancelTask(id: $id) { id } }', { id: task.id });
    assert.equal(body.errors, undefined, JSON.stringify(body.errors));
    await page.close();
  });
}
