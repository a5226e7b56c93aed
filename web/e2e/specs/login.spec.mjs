import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Server } from '../env.mjs';

// A second server, with real authentication (a token file): the console
// meets the server's own 401s, and the token it is given must travel on
// HTTP and in connection_init for the list and its live updates to work.
export function register(env) {
  test('login: a server with authentication asks for a token, and the token is sent both ways', async () => {
    const token = `tg_e2e_${randomBytes(16).toString('hex')}`;
    const secured = new Server({ token });
    secured.bin = env.server.bin; // built once, by newEnv
    const tokens = path.join(secured.tmp, 'tokens');
    writeFileSync(tokens, `${createHash('sha256').update(token).digest('hex')} e2e-admin admin\n`, { mode: 0o600 });
    secured.args = ['--token-file', tokens];
    await secured.start();
    try {
      const created = await secured.createTask({ type: 'noop', title: 'e2e behind a login' });
      const page = await env.page();
      const statuses = [];
      page.on('response', (r) => {
        if (new URL(r.url()).pathname === '/query') statuses.push(r.status());
      });
      const initPayloads = [];
      page.on('websocket', (ws) => {
        ws.on('framesent', (f) => {
          const text = typeof f.payload === 'string' ? f.payload : '';
          if (text.includes('connection_init')) initPayloads.push(text);
        });
      });

      // The server refuses the page's query (HTTP 401) or its websocket
      // (closed with 4401), whichever comes first: either brings the login.
      const closed = [];
      page.on('websocket', (ws) => ws.on('close', () => closed.push(ws.url())));
      await page.goto(`${secured.url}/console/tasks`);
      await page.getByTestId('login-form').waitFor();
      assert.ok(statuses.includes(401) || closed.length > 0, `the server answered ${statuses.join(', ')}, not 401, and closed no websocket`);
      await env.shot(page, 'login');
      await page.getByTestId('login-token').fill('tg_wrong');
      await page.getByTestId('login-submit').click();
      await page.getByTestId('login-error').waitFor();

      await page.getByTestId('login-token').fill(token);
      await page.getByTestId('login-submit').click();
      await page.getByTestId('page-tasks').waitFor();
      await page.locator(`[data-testid="task-row"][data-task-id="${created.id}"]`).waitFor();
      assert.equal(await page.evaluate(() => localStorage.getItem('taskgraph.token')), token);
      await page.waitForFunction(() => document.querySelector('[data-testid="live-indicator"]')?.getAttribute('data-phase') === 'connected');
      assert.ok(initPayloads.some((p) => p.includes(`Bearer ${token}`)), 'connection_init without the token');
      // Live through the authenticated socket: a task created now appears.
      const later = await secured.createTask({ type: 'noop', title: 'e2e created after login' });
      await page.locator(`[data-testid="task-row"][data-task-id="${later.id}"]`).waitFor();

      await page.getByTestId('sign-out').click();
      await page.getByTestId('login-form').waitFor();
      assert.equal(await page.evaluate(() => localStorage.getItem('taskgraph.token')), null);
      await page.close();
    } finally {
      await secured.stop();
      secured.cleanup();
    }
  });
}
