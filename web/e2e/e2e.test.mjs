// End-to-end tests of the console against the real server, in headless
// Chromium. Run: npm run e2e (from web/). Screenshots of every page go to
// artifacts/screenshots/ at the repository root (SCREENSHOT_DIR overrides).
//
// Specs are modules exporting register(env). The console is built into the
// server it talks to, so every spec runs against an API that has what the
// console uses (imports, downloads): nothing is probed or left out.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { newEnv, screenshotDir } from './env.mjs';

const env = await newEnv();
after(async () => {
  await env.close();
});

const specs = ['./specs/launch.spec.mjs', './specs/actions.spec.mjs', './specs/list.spec.mjs', './specs/dashboard.spec.mjs', './specs/login.spec.mjs', './specs/responsive.spec.mjs', './specs/connection.spec.mjs', './specs/schedules.spec.mjs', './specs/alerts.spec.mjs', './specs/bulkfilter.spec.mjs', './specs/nodes.spec.mjs', './specs/workers.spec.mjs', './specs/payload.spec.mjs', './specs/audit.spec.mjs', './specs/import.spec.mjs', './specs/times.spec.mjs', './specs/pageloads.spec.mjs', './specs/workflow.spec.mjs', './specs/review.spec.mjs', './specs/history.spec.mjs', './specs/tenants.spec.mjs'];
// E2E_SPECS=history,tenants runs only those specs (by name), in this order.
const only = (process.env.E2E_SPECS || '').split(',').map((s) => s.trim()).filter(Boolean);
const unknown = only.filter((o) => !specs.includes(`./specs/${o}.spec.mjs`));
if (unknown.length) throw new Error(`E2E_SPECS names no spec: ${unknown.join(', ')}`);
for (const spec of only.length ? specs.filter((s) => only.some((o) => s === `./specs/${o}.spec.mjs`)) : specs) {
  const mod = await import(spec);
  mod.register(env);
}

test('no uncaught errors in any page', () => {
  assert.deepEqual(env.pageErrors, []);
  console.log(`# screenshots in ${screenshotDir}`);
});
