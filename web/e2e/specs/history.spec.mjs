import assert from 'node:assert/strict';
import { test } from 'node:test';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// What the history says of a type over [from, to), from the API.
async function historyTotals(env, from, to, type, resolution = null) {
  const body = await env.server.gql(
    'query($from: Time!, $to: Time!, $type: String, $resolution: HistoryResolution) { taskHistory(from: $from, to: $to, type: $type, resolution: $resolution) { succeeded failed } }',
    { from, to, type, resolution },
  );
  if (body.errors) throw new Error(`taskHistory: ${JSON.stringify(body.errors)}`);
  return body.data.taskHistory.reduce((t, p) => ({ succeeded: t.succeeded + p.succeeded, failed: t.failed + p.failed }), { succeeded: 0, failed: 0 });
}

// Polls the API until fn's answer passes check (the history is written by
// each node every 5 s, and rolled up to hours once a minute).
async function until(what, fn, check, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (check(last)) return last;
    await sleep(500);
  }
  throw new Error(`${what}: still ${JSON.stringify(last)} after ${timeoutMs / 1000} s`);
}

// The pixels of a chart's canvas drawn in one of its series' colours (a
// line may cover another of the same values): none when the chart draws
// nothing but its axes and grid.
async function seriesPixels(page, selector) {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel);
    const colors = (el?.getAttribute('data-colors') ?? '')
      .split(',')
      .map((hex) => /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex))
      .filter(Boolean)
      .map((m) => [1, 2, 3].map((i) => parseInt(m[i], 16)));
    const canvas = el?.querySelector('canvas');
    if (colors.length === 0 || !canvas) return -1;
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && colors.some(([r, g, b]) => Math.abs(data[i] - r) < 12 && Math.abs(data[i + 1] - g) < 12 && Math.abs(data[i + 2] - b) < 12)) n++;
    }
    return n;
  }, selector);
}

export function register(env) {
  test('history: the range picker and the type selector drive charts read from taskHistory', async () => {
    const hour = new Date(Date.now() - 3_600_000).toISOString();
    const soon = new Date(Date.now() + 3_600_000).toISOString();
    const before = { noop: await historyTotals(env, hour, soon, 'noop'), webhook: await historyTotals(env, hour, soon, 'webhook') };
    // Four noop tasks succeed, two webhooks to a closed port fail.
    for (let i = 0; i < 4; i++) await env.server.createTask({ type: 'noop', title: `e2e history ${i}` });
    for (let i = 0; i < 2; i++) await env.server.createTask({ type: 'webhook', title: `e2e history failing ${i}`, maxAttempts: 1, input: { url: 'http://127.0.0.1:1/' } });
    await until('the history of noop', () => historyTotals(env, hour, soon, 'noop'), (t) => t.succeeded >= before.noop.succeeded + 4);
    await until('the history of webhook', () => historyTotals(env, hour, soon, 'webhook'), (t) => t.failed >= before.webhook.failed + 2);
    // Hours are rolled up from the minutes once a minute.
    const hours = [new Date(Math.floor(Date.now() / 3_600_000 - 1) * 3_600_000).toISOString(), new Date(Math.ceil(Date.now() / 3_600_000 + 1) * 3_600_000).toISOString()];
    await until('the hours of noop', () => historyTotals(env, ...hours, 'noop', 'HOUR'), (t) => t.succeeded >= before.noop.succeeded + 4);
    await until('the hours of webhook', () => historyTotals(env, ...hours, 'webhook', 'HOUR'), (t) => t.failed >= before.webhook.failed + 2);

    const page = await env.page();
    const asked = [];
    // urql sends queries as GET (within the URL's limit), else POST.
    page.on('request', (r) => {
      const url = new URL(r.url());
      if (url.pathname !== '/query') return;
      try {
        const body = r.method() === 'GET' ? { query: url.searchParams.get('query'), variables: JSON.parse(url.searchParams.get('variables') ?? '{}') } : JSON.parse(r.postData() ?? '{}');
        if (/query TaskHistory\b/.test(body.query ?? '')) asked.push(body.variables);
      } catch {
        // not JSON (an upload)
      }
    });
    await page.goto(env.url(''));
    const history = page.getByTestId('history');
    await history.waitFor();

    // range: 1 h → 24 h → 7 d; each time the query's range changes, the
    // page says so, and the chart draws the tasks.
    const ranges = [
      ['1h', 3_600_000, 'MINUTE'],
      ['24h', 24 * 3_600_000, 'HOUR'],
      ['7d', 7 * 24 * 3_600_000, 'HOUR'],
    ];
    for (const [id, span, resolution] of ranges) {
      if (id !== '1h') await page.getByTestId(`range-${id}`).click();
      await page.locator(`[data-testid="range-picker"][data-range="${id}"]`).waitFor();
      await page.locator(`[data-testid="history"][data-resolution="${resolution}"]`).waitFor();
      const from = await history.getAttribute('data-from');
      const to = await history.getAttribute('data-to');
      assert.equal(Date.parse(to) - Date.parse(from), span, `${id}: the range on the page`);
      assert.ok(Date.parse(to) > Date.now(), `${id}: the range ends with the current bucket`);
      await until(`${id}: a TaskHistory request of that range`, async () => asked.at(-1), (v) => v && v.from === from && v.to === to && v.resolution === resolution, 30_000);
      await page.waitForFunction(
        (n) => Number(document.querySelector('[data-testid="hist-totals"]')?.getAttribute('data-succeeded')) >= n,
        before.noop.succeeded + 4,
      );
      assert.ok(Number(await page.getByTestId('hist-throughput').getAttribute('data-total')) >= 6, `${id}: the throughput chart has the tasks`);
      assert.equal(Number(await page.getByTestId('hist-throughput').getAttribute('data-points')), span / (resolution === 'MINUTE' ? 60_000 : 3_600_000), `${id}: one point per bucket`);
      await page.waitForFunction(() => document.querySelector('[data-testid="hist-throughput"] canvas') !== null);
      assert.ok((await seriesPixels(page, '[data-testid="hist-throughput"]')) > 10, `${id}: the throughput chart draws its lines`);
      assert.ok((await seriesPixels(page, '[data-testid="hist-flow"]')) > 10, `${id}: the created/started chart draws its lines`);
      if (id === '1h') await env.shot(page, 'dashboard-history');
    }

    // Per type: noop's counts, then webhook's, each what the API says of
    // that type over the page's range, and not the same.
    const from = await history.getAttribute('data-from');
    const to = await history.getAttribute('data-to');
    const shown = async (type) => {
      await page.getByTestId('history-type').selectOption(type);
      await page.locator(`[data-testid="history"][data-type="${type}"][data-loaded="true"]`).waitFor();
      await until(`a TaskHistory request of ${type}`, async () => asked.at(-1), (v) => v && v.type === type, 30_000);
      const api = await historyTotals(env, from, to, type);
      await page.waitForFunction(
        ([s, f]) => {
          const el = document.querySelector('[data-testid="hist-totals"]');
          return Number(el?.getAttribute('data-succeeded')) === s && Number(el?.getAttribute('data-failed')) === f;
        },
        [api.succeeded, api.failed],
      );
      assert.ok((await seriesPixels(page, '[data-testid="hist-throughput"]')) > 0 || api.succeeded === 0, `${type}: the throughput chart draws its succeeded line`);
      return api;
    };
    const noop = await shown('noop');
    assert.ok(noop.succeeded >= before.noop.succeeded + 4, `noop: ${JSON.stringify(noop)}`);
    const webhook = await shown('webhook');
    assert.ok(webhook.failed >= before.webhook.failed + 2, `webhook: ${JSON.stringify(webhook)}`);
    assert.notDeepEqual(noop, webhook, 'the two types show different counts');
    // The failed line of webhook is drawn (its second series).
    assert.ok(Number(await page.getByTestId('hist-throughput').getAttribute('data-total')) >= 2);
    await env.shot(page, 'dashboard-history-type');

    // The deadlines report of the same range: a task due before its end,
    // met at once, is counted for its type, and downloaded as CSV.
    const due = new Date(Math.min(Date.parse(to) - 1000, Date.now() + 600_000)).toISOString();
    const dueTask = await env.server.createTask({ type: 'noop', title: 'e2e history deadline', deadline: due });
    await until('the task with a deadline', async () => (await env.server.gql('query($id: ID!) { task(id: $id) { deadlineState } }', { id: dueTask.id })).data?.task?.deadlineState, (s) => s === 'MET');
    const row = page.locator('[data-testid="deadlines"] [data-testid="deadline-row"][data-key="noop"]');
    await row.waitFor();
    const api = await env.server.gql('query($from: Time!, $to: Time!) { deadlineReport(from: $from, to: $to) { key total met missed open } }', { from, to });
    const want = api.data.deadlineReport.find((r) => r.key === 'noop');
    assert.ok(want && want.met >= 1, `the API's report: ${JSON.stringify(api)}`);
    await page.waitForFunction((w) => {
      const cells = [...document.querySelectorAll('[data-testid="deadline-row"][data-key="noop"] td')].map((td) => td.textContent);
      return cells[1] === String(w.total) && cells[2] === String(w.met);
    }, want);
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('deadlines-csv').click()]);
    const csv = (await (await import('node:fs/promises')).readFile(await download.path(), 'utf8')).replace(/^\uFEFF/, '');
    const lines = csv.trim().split('\r\n');
    assert.equal(lines[0], 'Type,Total,Met,Missed,Open,On time');
    assert.ok(lines.some((l) => l.startsWith(`noop,${want.total},${want.met},${want.missed},${want.open},`)), csv);

    // The cost report of the same range: each type's executions as the
    // API counts them, webhook's failures among them; downloaded as CSV.
    const cost = await env.server.gql('query($from: Time!, $to: Time!) { taskCost(from: $from, to: $to) { key executions failed rowsImported rowsExported bytesStored } }', { from, to });
    const costOf = (k) => cost.data.taskCost.find((r) => r.key === k);
    assert.ok(costOf('noop')?.executions >= 4 && costOf('webhook')?.failed >= 2, `the API's cost: ${JSON.stringify(cost)}`);
    await page.waitForFunction(() => Number(document.querySelector('[data-testid="cost-row"][data-key="noop"]')?.getAttribute('data-executions')) >= 4);
    const [costDownload] = await Promise.all([page.waitForEvent('download'), page.getByTestId('cost-csv').click()]);
    const costCsv = (await (await import('node:fs/promises')).readFile(await costDownload.path(), 'utf8')).replace(/^\uFEFF/, '');
    assert.equal(costCsv.trim().split('\r\n')[0], 'Type,Executions,Succeeded,Failed,Cancelled,Retries,Created,Run time,Run p95,Rows imported,Rows exported,Bytes stored');
    assert.ok(costCsv.includes('\r\nwebhook,'), costCsv);
    // Rows and bytes: noop writes none; its row says so in the table and
    // in the CSV's last three columns.
    assert.deepEqual([costOf('noop').rowsImported, costOf('noop').rowsExported, costOf('noop').bytesStored], [0, 0, 0], `the API's cost: ${JSON.stringify(cost)}`);
    const noopRow = page.locator('[data-testid="cost-row"][data-key="noop"]');
    assert.equal(await noopRow.getAttribute('data-bytes-stored'), '0');
    assert.deepEqual((await noopRow.locator('td').allTextContents()).slice(-3), ['0', '0', '0 B']);
    assert.ok(costCsv.split('\r\n').some((l) => l.startsWith('noop,') && l.endsWith(',0,0,0')), costCsv);

    // The types page draws a trend line per type.
    await page.goto(env.url('types'));
    await page.locator('[data-testid="type-noop"] [data-testid="type-trend"]').waitFor();
    await page.waitForFunction(() => Number(document.querySelector('[data-testid="type-noop"] [data-testid="type-trend-total"]')?.getAttribute('data-total')) >= 4);
    assert.ok((await seriesPixels(page, '[data-testid="type-noop"] [data-testid="type-trend"]')) > 5, 'the trend line is drawn');
    await env.shot(page, 'types-trends');
    await page.close();
  });
}
