import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Server } from '../env.mjs';

// The tenants page on a server with tokens: a platform administrator sets
// a tenant's quota (the API's typed errors shown by their field), the
// tenant's admin reads it, read-only, and an operator has no such page.
export function register(env) {
  test('tenants: a platform administrator sets a quota, the tenant admin reads it, an operator sees no entry', async () => {
    const tokens = { root: `tg_e2e_${randomBytes(16).toString('hex')}`, admin: `tg_e2e_${randomBytes(16).toString('hex')}`, op: `tg_e2e_${randomBytes(16).toString('hex')}` };
    const secured = new Server({ token: tokens.root });
    secured.bin = env.server.bin; // built once, by newEnv
    const file = path.join(secured.tmp, 'tokens');
    const line = (token, rest) => `${createHash('sha256').update(token).digest('hex')} ${rest}\n`;
    writeFileSync(file, line(tokens.root, 'root admin') + line(tokens.admin, 'acme-admin admin acme') + line(tokens.op, 'acme-op operator acme'), { mode: 0o600 });
    secured.args = ['--token-file', file, '--platform-admins', 'token:root'];
    await secured.start();
    const page = await env.page();
    const signIn = async (token) => {
      // Signed out first: the token of the one before is forgotten.
      await page.goto(`${secured.url}/console/`);
      await page.evaluate(() => localStorage.removeItem('taskgraph.token'));
      await page.reload();
      await page.getByTestId('login-form').waitFor();
      await page.getByTestId('login-token').fill(token);
      await page.getByTestId('login-submit').click();
      await page.getByTestId('page-dashboard').waitFor();
    };
    try {
      // The platform administrator.
      await signIn(tokens.root);
      await page.locator('nav[data-access="platform"]').waitFor();
      await page.getByTestId('nav-tenants').click();
      await page.getByTestId('page-tenants').waitFor();
      const form = page.getByTestId('tenant-new');
      await form.getByTestId('quota-tenant').fill('acme');
      await form.getByTestId('quota-input-maxWaiting').fill('5');
      await form.getByTestId('quota-input-maxSchedules').fill('2');
      await form.getByTestId('quota-input-maxRunning').fill('3');
      await form.getByTestId('quota-input-weight').fill('4');
      await form.getByTestId('quota-input-rateLimit').fill('50');
      await form.getByTestId('quota-input-ratePeriodSeconds').fill('60');
      // Below the API's least interval: its VALIDATION problem, by the field.
      await form.getByTestId('quota-input-minScheduleIntervalSeconds').fill('0');
      await form.getByTestId('quota-save').click();
      await form.getByTestId('quota-error-minScheduleIntervalSeconds').waitFor();
      assert.match(await form.getByTestId('quota-error-minScheduleIntervalSeconds').textContent(), /between 1 and/);
      // Not a number: said before anything is sent.
      await form.getByTestId('quota-input-minScheduleIntervalSeconds').fill('ten');
      await form.getByTestId('quota-save').click();
      assert.equal(await form.getByTestId('quota-error-minScheduleIntervalSeconds').textContent(), 'A whole number, or empty for no limit.');
      await form.getByTestId('quota-input-minScheduleIntervalSeconds').fill('30');
      await form.getByTestId('quota-save').click();
      await form.getByTestId('quota-saved').waitFor();
      const card = page.locator('[data-testid="tenant-quota"][data-tenant="acme"]');
      await card.locator('[data-testid="quota-maxWaiting"][data-value="5"]').waitFor();
      assert.equal(await card.getByTestId('quota-maxSchedules').getAttribute('data-value'), '2');
      assert.equal(await card.getByTestId('quota-minScheduleIntervalSeconds').getAttribute('data-value'), '30');
      assert.equal(await card.getByTestId('quota-maxRunning').getAttribute('data-value'), '3');
      assert.equal(await card.getByTestId('quota-weight').getAttribute('data-value'), '4');
      assert.equal(await card.getByTestId('quota-rateLimit').getAttribute('data-value'), '50');
      assert.equal(await card.getByTestId('quota-rate-usage').getAttribute('data-started'), '0');
      const saved = await secured.gql('{ tenantQuota(tenant: "acme") { weight maxRunning rateLimit ratePeriodSeconds maxWaiting maxSchedules minScheduleIntervalSeconds updatedBy } }');
      assert.deepEqual(saved.data.tenantQuota, { weight: 4, maxRunning: 3, rateLimit: 50, ratePeriodSeconds: 60, maxWaiting: 5, maxSchedules: 2, minScheduleIntervalSeconds: 30, updatedBy: 'root' });
      // Edited in place: no limit of schedules any more.
      await card.getByTestId('tenant-edit').click();
      await card.getByTestId('quota-input-maxWaiting').fill('7');
      await card.getByTestId('quota-input-maxSchedules').fill('');
      await card.getByTestId('quota-save').click();
      await card.locator('[data-testid="quota-maxWaiting"][data-value="7"]').waitFor();
      assert.equal(await card.getByTestId('quota-maxSchedules').getAttribute('data-value'), '');
      await env.shot(page, 'tenants');

      // The tenant's admin: its own quota, read-only.
      await signIn(tokens.admin);
      await page.locator('nav[data-access="admin"]').waitFor();
      await page.getByTestId('nav-tenants').click();
      await page.getByTestId('page-tenants').waitFor();
      const own = page.locator('[data-testid="tenant-quota"][data-tenant="acme"]');
      await own.locator('[data-testid="quota-maxWaiting"][data-value="7"]').waitFor();
      assert.equal(await page.getByTestId('tenant-quota').count(), 1, 'the tenant admin sees its own tenant only');
      assert.equal(await page.getByTestId('tenant-edit').count(), 0, 'no edit for a tenant admin');
      assert.equal(await page.getByTestId('quota-form').count(), 0, 'no form for a tenant admin');
      await env.shot(page, 'tenants-admin');

      // An operator: no entry.
      await signIn(tokens.op);
      await page.locator('nav[data-access="none"]').waitFor();
      assert.equal(await page.getByTestId('nav-tenants').count(), 0, 'an operator sees no Tenants entry');
      assert.equal(await page.getByTestId('nav-tasks').count(), 1);
      await page.getByTestId('sign-out').click();
      await page.getByTestId('login-form').waitFor();
    } finally {
      await page.close();
      await secured.stop();
      secured.cleanup();
    }
  });
}
