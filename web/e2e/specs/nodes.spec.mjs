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

  test('nodes: each node\'s clock offset, and a warning past the threshold', async () => {
    const page = await env.page();
    // The suite's node runs on SQLite (no offset); the page must show what
    // the API says, so a second view rewrites the answers to a node two
    // minutes ahead, past its threshold (the Go suite's TestOneClockForTheCluster
    // makes real ones on PostgreSQL).
    await page.goto(env.url('nodes'));
    const live = page.locator('[data-testid="node"][data-state="LIVE"]');
    await live.first().waitFor();
    assert.equal(await live.getByTestId('node-clock').getAttribute('data-skewed'), 'false');
    assert.match(await live.getByTestId('node-clock-offset').textContent(), /^0 ms ahead of the database$/);
    assert.equal(await live.getByTestId('node-clock-skewed').count(), 0);
    await page.close();

    const skewed = await env.page();
    const skew = (text) => {
      const msg = JSON.parse(text);
      const data = msg.payload?.data ?? msg.data;
      for (const key of ['clusterNodes', 'clusterNodesChanged']) {
        for (const n of data?.[key] ?? []) Object.assign(n, { clockOffsetMs: -120000, clockSkewed: true });
      }
      return JSON.stringify(msg);
    };
    await skewed.route('**/query', async (route) => {
      const req = route.request();
      const op = new URL(req.url()).searchParams.get('operationName') ?? (req.method() === 'POST' ? req.postDataJSON()?.operationName : null);
      if (op !== 'ClusterNodes') return route.continue();
      const res = await route.fetch();
      await route.fulfill({ response: res, body: skew(await res.text()) });
    });
    await skewed.routeWebSocket('**/query', (ws) => {
      const server = ws.connectToServer();
      ws.onMessage((m) => server.send(m));
      server.onMessage((m) => ws.send(typeof m === 'string' ? skew(m) : m));
    });
    await skewed.goto(env.url('nodes'));
    const node = skewed.locator('[data-testid="node"][data-state="LIVE"]');
    await node.getByTestId('node-clock-skewed').waitFor();
    assert.equal(await node.getByTestId('node-clock-offset').textContent(), '120.0 s ahead of the database');
    await env.shot(skewed, 'nodes-clock-skew');
    await skewed.close();
  });

  test('nodes: a node killed while it led is not shown leading once gone', async () => {
    const page = await env.page();
    await page.goto(env.url('nodes'));
    const live = page.locator('[data-testid="node"][data-state="LIVE"]');
    await live.first().waitFor();
    const dead = await live.getAttribute('data-node-id');
    await live.getByTestId('node-leading').waitFor();
    await page.close();

    // kill -9: the node never says it stopped; its row keeps "leading".
    env.server.proc.kill('SIGKILL');
    await env.server.exited;
    await env.server.start();

    const after = await env.page();
    await after.goto(env.url('nodes'));
    // Its lease (three refreshes, 15 s) runs out, and the new node leads.
    await after.locator(`[data-testid="node"][data-node-id="${dead}"][data-state="GONE"]`).waitFor({ timeout: 60_000 });
    const heir = after.locator('[data-testid="node"][data-state="LIVE"]');
    await heir.getByTestId('node-leading').waitFor({ timeout: 30_000 });
    assert.notEqual(await heir.getAttribute('data-node-id'), dead);
    assert.equal(await after.getByTestId('node-leading').count(), 1, 'one node leads the watchdog');
    await env.shot(after, 'nodes-after-kill');
    await after.close();
  });
}
