// End-to-end tests of the console against the real server, in headless
// Chromium. Run: npm run e2e (from web/). Screenshots of every page go to
// artifacts/screenshots/ at the repository root (SCREENSHOT_DIR overrides).
//
// Specs are modules exporting register(env). The import spec needs the
// importFile mutation; it is included only when the server has it (probed
// the way the console probes), and the runner says so either way.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { newEnv, screenshotDir } from './env.mjs';
import { IMPORT_PROBE } from './probe.mjs';

const env = await newEnv();
after(async () => {
  await env.close();
});

const specs = ['./specs/launch.spec.mjs', './specs/actions.spec.mjs', './specs/list.spec.mjs', './specs/dashboard.spec.mjs', './specs/login.spec.mjs', './specs/responsive.spec.mjs', './specs/connection.spec.mjs', './specs/schedules.spec.mjs', './specs/alerts.spec.mjs', './specs/bulkfilter.spec.mjs', './specs/nodes.spec.mjs', './specs/payload.spec.mjs', './specs/audit.spec.mjs', './specs/review.spec.mjs'];
const hasImport = await env.server.supports(IMPORT_PROBE, 'importFile');
if (hasImport) {
  specs.push('./specs/import.spec.mjs');
  console.log('# importFile: present — including specs/import.spec.mjs');
} else {
  console.log('# importFile: absent on this server — specs/import.spec.mjs not included (it needs the import API)');
}
if (process.env.E2E_REQUIRE_IMPORT === '1' && !hasImport) {
  throw new Error('E2E_REQUIRE_IMPORT=1 but the server has no importFile mutation');
}

for (const spec of specs) {
  const mod = await import(spec);
  mod.register(env);
}

test('no uncaught errors in any page', () => {
  assert.deepEqual(env.pageErrors, []);
  console.log(`# screenshots in ${screenshotDir}`);
});
