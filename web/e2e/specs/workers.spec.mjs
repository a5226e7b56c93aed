import assert from 'node:assert/strict';
import { test } from 'node:test';

// External workers on the Nodes page: a worker that claims over the
// worker protocol is listed with what it says of itself and its types;
// draining it asks for confirmation, shows at once, and its next claim
// takes nothing and answers draining; undraining brings it back.
export function register(env) {
  test('nodes: an external worker, drain and undrain', async () => {
    const declared = await env.server.gql('mutation { declareTaskType(input: {name: "e2e.ext", timeoutSeconds: 60}) { name } }');
    assert.equal(declared.errors, undefined, JSON.stringify(declared.errors));
    // The suite's server runs without tokens: the protocol answers
    // requests addressed to localhost.
    const claim = async () => {
      const res = await fetch(`${env.server.url}/worker/v1/claim`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ workerId: 'e2e-py', language: 'python', version: '3.11', types: ['e2e.ext'], max: 1 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      return res.json();
    };
    assert.notEqual((await claim()).draining, true);

    const page = await env.page();
    await page.goto(env.url('nodes'));
    await page.getByTestId('page-nodes').waitFor();
    const row = page.locator('[data-testid="worker"][data-worker-name="e2e-py"]');
    await row.waitFor();
    assert.equal(await row.getAttribute('data-state'), 'LIVE');
    assert.match(await row.getByTestId('worker-language').textContent(), /python 3\.11/);
    assert.equal(await row.getByTestId('worker-types').textContent(), 'e2e.ext');
    await env.shot(page, 'nodes-workers');

    await row.getByTestId('worker-drain').click();
    const dialog = page.getByTestId('worker-confirm');
    await dialog.waitFor();
    await dialog.getByTestId('confirm-yes').click();
    await dialog.waitFor({ state: 'detached' });
    await page.locator('[data-testid="worker"][data-worker-name="e2e-py"][data-state="DRAINING"]').waitFor();
    const drained = await claim();
    assert.equal(drained.draining, true, 'a drained worker is told to stop');
    assert.deepEqual(drained.tasks, []);

    await row.getByTestId('worker-undrain').click();
    await page.getByTestId('worker-confirm').getByTestId('confirm-yes').click();
    await page.locator('[data-testid="worker"][data-worker-name="e2e-py"][data-state="LIVE"]').waitFor();
    assert.notEqual((await claim()).draining, true);
    await page.close();
  });
}
