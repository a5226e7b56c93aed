import assert from 'node:assert/strict';
import { test } from 'node:test';

// The server under test has no auth; the test plays a server that answers
// UNAUTHENTICATED (route interception) until a token is given, and checks
// that the token then travels on HTTP and in connection_init.
export function register(env) {
  test('login: UNAUTHENTICATED leads to the login screen, and the token is sent both ways', async () => {
    const page = await env.page();
    let requireToken = true;
    const seenHeaders = [];
    await page.route('**/query', async (route) => {
      const auth = route.request().headers()['authorization'];
      seenHeaders.push(auth ?? '');
      if (requireToken && auth !== 'Bearer e2e-token') {
        await route.fulfill({
          status: 401,
          contentType: 'application/json',
          body: JSON.stringify({ errors: [{ message: 'missing or invalid token', extensions: { code: 'UNAUTHENTICATED' } }] }),
        });
        return;
      }
      await route.continue();
    });
    const initPayloads = [];
    page.on('websocket', (ws) => {
      ws.on('framesent', (f) => {
        const text = typeof f.payload === 'string' ? f.payload : '';
        if (text.includes('connection_init')) initPayloads.push(text);
      });
    });

    await page.goto(env.url('tasks'));
    await page.getByTestId('login-form').waitFor();
    await env.shot(page, 'login');
    await page.getByTestId('login-token').fill('wrong');
    await page.getByTestId('login-submit').click();
    await page.getByTestId('login-error').waitFor();

    await page.getByTestId('login-token').fill('e2e-token');
    await page.getByTestId('login-submit').click();
    await page.getByTestId('page-tasks').waitFor();
    await page.getByTestId('task-row').first().waitFor();
    assert.equal(await page.evaluate(() => localStorage.getItem('taskgraph.token')), 'e2e-token');
    assert.ok(seenHeaders.includes('Bearer e2e-token'));
    await page.waitForFunction(() => document.querySelector('[data-testid="live-indicator"]')?.getAttribute('data-phase') === 'connected');
    assert.ok(initPayloads.some((p) => p.includes('Bearer e2e-token')), `connection_init without the token: ${initPayloads.join(' | ')}`);

    requireToken = false;
    await page.getByTestId('sign-out').click();
    await page.getByTestId('login-form').waitFor();
    assert.equal(await page.evaluate(() => localStorage.getItem('taskgraph.token')), null);
    await page.close();
  });
}
