import { describe, expect, it } from 'vitest';
import { en } from '../i18n/en';
import { zh } from '../i18n/zh';
import { format, translator, viewerLocale } from '../i18n';
import { bucketEdges, BUCKET_MS, toBuckets } from './buckets';
import { DEFAULT_FILTER, filterToSearch, liveWhere, parseFilter, toVariables, toWhere, withRange, autoRefreshes } from './filters';
import { buildInput, canUseForm, emptyValues, fieldsOf } from './schemaForm';
import { artifactKinds, importResult } from './artifacts';
import { formatDateTime, formatTime, nextTick, formatDuration } from './time';
import { mergeLogs, newestTask } from '../pages/TaskDetail';
import type { TaskFull, TaskLogLine } from '../api/queries';

// The input schemas the server reports for its built-in types.
const NOOP = {
  properties: {
    sleepMs: { type: 'integer', maximum: 3600000, minimum: 0, description: 'How long to take' },
    note: { type: 'string', maxLength: 1000, description: 'Echoed in the result' },
  },
  additionalProperties: false,
  type: 'object',
};
const WEBHOOK = {
  properties: {
    url: { type: 'string', format: 'uri', description: 'http(s) URL to call' },
    method: { type: 'string', enum: ['POST', 'PUT', 'PATCH'], default: 'POST' },
    headers: { additionalProperties: { type: 'string' }, type: 'object' },
    body: { description: 'JSON body' },
    timeoutMs: { type: 'integer', maximum: 120000, minimum: 1, default: 10000 },
  },
  additionalProperties: false,
  type: 'object',
  required: ['url'],
};

describe('i18n', () => {
  it('has every English key in Chinese, and no other', () => {
    expect(Object.keys(zh).sort()).toEqual(Object.keys(en).sort());
    for (const [k, v] of Object.entries(zh)) expect(v, k).not.toBe('');
  });
  it('keeps the same placeholders in both languages', () => {
    const names = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
    for (const k of Object.keys(en) as (keyof typeof en)[]) expect(names(zh[k]), k).toEqual(names(en[k]));
  });
  it('formats placeholders and leaves unknown ones visible', () => {
    expect(format('{a} of {b}', { a: 1, b: 'x' })).toBe('1 of x');
    expect(format('{a} {missing}', { a: 1 })).toBe('1 {missing}');
    expect(translator('zh')('list.selected', { n: 3 })).toBe('已选 3 个');
  });
});

describe('filters', () => {
  it('round-trips through the URL', () => {
    const f = { ...DEFAULT_FILTER, statuses: ['FAILED', 'CANCELLED'] as const, type: 'noop', owner: 'ann', q: 'order 7', sort: 'FINISHED_AT' as const, dir: 'ASC' as const, size: 50 };
    const back = parseFilter(new URLSearchParams(filterToSearch({ ...f, statuses: [...f.statuses] }).slice(1)));
    expect(back).toEqual({ ...f, statuses: [...f.statuses] });
    expect(filterToSearch(DEFAULT_FILTER)).toBe('');
  });
  it('ignores what it does not know', () => {
    const f = parseFilter(new URLSearchParams('status=NOPE,FAILED&sort=DROP&size=7&dir=x'));
    expect(f.statuses).toEqual(['FAILED']);
    expect(f.sort).toBe('CREATED_AT');
    expect(f.size).toBe(20);
    expect(f.dir).toBe('DESC');
  });
  it('builds the where input', () => {
    expect(toWhere(DEFAULT_FILTER)).toEqual({});
    expect(toWhere({ ...DEFAULT_FILTER, statuses: ['FAILED'], q: ' x ', owner: 'o', from: '2026-01-01T00:00:00.000Z' })).toEqual({
      status: 'FAILED',
      search: 'x',
      owner: 'o',
      createdAtGTE: '2026-01-01T00:00:00.000Z',
    });
    expect(toWhere({ ...DEFAULT_FILTER, statuses: ['FAILED', 'PENDING'] })).toEqual({ statusIn: ['FAILED', 'PENDING'] });
  });
  it('pages forward with first/after and back with last/before', () => {
    expect(toVariables({ ...DEFAULT_FILTER, after: 'c1' })).toMatchObject({ first: 20, after: 'c1', where: null });
    expect(toVariables({ ...DEFAULT_FILTER, before: 'c0' })).toMatchObject({ last: 20, before: 'c0' });
  });
  it('subscribes to the rows on screen and to new matches', () => {
    expect(liveWhere(DEFAULT_FILTER, ['1'])).toBeNull();
    const f = { ...DEFAULT_FILTER, statuses: ['PENDING' as const] };
    expect(liveWhere(f, [])).toEqual({ status: 'PENDING' });
    expect(liveWhere(f, ['1', '2'])).toEqual({ or: [{ idIn: ['1', '2'] }, { status: 'PENDING' }] });
  });
  it('fixes a preset range when it is chosen', () => {
    const f = withRange(DEFAULT_FILTER, '1h', Date.parse('2026-11-29T10:00:00Z'));
    expect(f.from).toBe('2026-11-29T09:00:00.000Z');
    expect(withRange(f, '', 0).from).toBe('');
  });
  it('refreshes by itself only on the newest-first first page', () => {
    expect(autoRefreshes(DEFAULT_FILTER)).toBe(true);
    expect(autoRefreshes({ ...DEFAULT_FILTER, after: 'x' })).toBe(false);
    expect(autoRefreshes({ ...DEFAULT_FILTER, dir: 'ASC' })).toBe(false);
  });
});

describe('schema forms', () => {
  it('reads the field kinds of the built-in types', () => {
    expect(fieldsOf(NOOP).map((f) => [f.name, f.kind, f.required])).toEqual([
      ['sleepMs', 'integer', false],
      ['note', 'string', false],
    ]);
    expect(fieldsOf(WEBHOOK).map((f) => [f.name, f.kind, f.required])).toEqual([
      ['url', 'url', true],
      ['method', 'enum', false],
      ['headers', 'map', false],
      ['body', 'json', false],
      ['timeoutMs', 'integer', false],
    ]);
    expect(canUseForm(WEBHOOK)).toBe(true);
    expect(canUseForm({ type: 'array' })).toBe(false);
  });
  it('builds the input and leaves empty optional fields to the server', () => {
    const fields = fieldsOf(WEBHOOK);
    const values = {
      ...emptyValues(fields),
      url: 'http://127.0.0.1:1/',
      headers: [
        { key: 'X-A', value: '1' },
        { key: ' ', value: 'dropped' },
      ],
      body: '{"a": [1]}',
    };
    expect(buildInput(fields, values)).toEqual({
      input: { url: 'http://127.0.0.1:1/', headers: { 'X-A': '1' }, body: { a: [1] } },
      errors: {},
    });
  });
  it('says what is wrong per field', () => {
    const { errors } = buildInput(fieldsOf(WEBHOOK), { url: 'ftp://x', body: '{', timeoutMs: '0' });
    expect(errors.url.key).toBe('launch.badUrl');
    expect(errors.body.key).toBe('launch.badJson');
    expect(errors.timeoutMs).toEqual({ key: 'launch.min', vars: { n: 1 } });
    expect(buildInput(fieldsOf(WEBHOOK), {}).errors.url.key).toBe('launch.required');
    expect(buildInput(fieldsOf(NOOP), { sleepMs: '1.5' }).errors.sleepMs.key).toBe('launch.notInteger');
    expect(buildInput(fieldsOf(NOOP), { sleepMs: '250', note: 'hi' }).input).toEqual({ sleepMs: 250, note: 'hi' });
  });
});

describe('dashboard buckets', () => {
  it('aligns twelve 5-minute buckets ending after now', () => {
    const now = Date.parse('2026-11-29T10:07:30Z');
    const edges = bucketEdges(now);
    expect(edges).toHaveLength(13);
    expect(new Date(edges[12]).toISOString()).toBe('2026-11-29T10:10:00.000Z');
    expect(edges[12] - edges[0]).toBe(12 * BUCKET_MS);
    expect(bucketEdges(now + 60_000)).toEqual(edges);
  });
  it('computes the failure rate from the aliased counts', () => {
    const b = toBuckets([0, 1, 2], { s0: { totalCount: 3 }, f0: { totalCount: 1 } });
    expect(b[0]).toMatchObject({ succeeded: 3, failed: 1, failureRate: 0.25 });
    expect(b[1]).toMatchObject({ succeeded: 0, failed: 0, failureRate: null });
  });
});

describe('import results and artifacts', () => {
  it('reads an import result', () => {
    const r = { status: 'PARTIAL_SUCCESS', totalCount: 5, successCount: 3, failedCount: 2, reportFile: 'r.xlsx' };
    expect(importResult(r)).toEqual(r);
    expect(importResult({ note: 'x' })).toBeNull();
    expect(artifactKinds({ type: 'import', result: r })).toEqual(['ERROR_REPORT', 'SOURCE']);
    expect(artifactKinds({ type: 'noop', result: { note: 'x' } })).toEqual([]);
  });
});

describe('logs', () => {
  const line = (id: string): TaskLogLine => ({ id, createdAt: '', level: 'INFO', message: id, fields: null, instanceID: null });
  it('merges the tail and live lines by id, in order, without duplicates', () => {
    const a = mergeLogs([], [line('3'), line('1')]);
    const b = mergeLogs(a, [line('2'), line('3'), line('8589934594')]);
    expect(b.map((l) => l.id)).toEqual(['1', '2', '3', '8589934594']);
    expect(mergeLogs(b, [line('2')])).toBe(b);
    expect(mergeLogs(b, [line('9')], 2).map((l) => l.id)).toEqual(['8589934594', '9'].sort((x, y) => Number(x) - Number(y)));
  });
});

describe('time', () => {
  it('formats durations', () => {
    expect(formatDuration(850)).toBe('850 ms');
    expect(formatDuration(12_300)).toBe('12.3 s');
    expect(formatDuration(245_000)).toBe('4 min 05 s');
    expect(formatDuration(-1)).toBe('—');
  });
});

describe('task detail', () => {
  const at = (version: number, status: string, id = '7') => ({ id, version, status }) as unknown as TaskFull;
  it('shows the newer of the query answer and the subscription message', () => {
    // The query answered late, with the state read before the task finished.
    expect(newestTask(at(1, 'PENDING'), at(4, 'SUCCESS'), '7')?.status).toBe('SUCCESS');
    expect(newestTask(at(4, 'SUCCESS'), at(3, 'EXECUTING'), '7')?.status).toBe('SUCCESS');
    expect(newestTask(null, at(2, 'EXECUTING'), '7')?.status).toBe('EXECUTING');
    expect(newestTask(at(2, 'EXECUTING'), null, '7')?.status).toBe('EXECUTING');
    // A message of the task shown before (the page moved to another id).
    expect(newestTask(at(1, 'PENDING', '8'), at(9, 'SUCCESS'), '8')?.id).toBe('8');
    expect(newestTask(null, at(9, 'SUCCESS'), '8')).toBeNull();
  });
});

describe('times', () => {
  it('names the zone, in the viewer\'s locale', () => {
    const iso = '2026-12-02T14:31:02.123Z';
    const zone = new Intl.DateTimeFormat('en-GB', { timeZoneName: 'short' }).formatToParts(new Date(iso)).find((p) => p.type === 'timeZoneName')?.value;
    expect(zone).toBeTruthy();
    expect(formatDateTime(iso, 'en-GB')).toContain(zone as string);
    expect(formatTime(iso, 'en-GB')).toMatch(/\d\d:\d\d:\d\d[.,]123/);
    expect(formatTime(iso, 'en-GB')).toContain(zone as string);
    // The same instant reads differently by locale (day and month order).
    expect(formatDateTime(iso, 'en-US')).not.toEqual(formatDateTime(iso, 'zh-CN'));
  });
  it('ticks a relative label when it changes', () => {
    expect(nextTick(0)).toBe(1000);
    expect(nextTick(12_400)).toBe(600);
    expect(nextTick(-12_400)).toBe(600);
    expect(nextTick(61_000)).toBe(59_000);
    expect(nextTick(3_600_000 + 5)).toBe(3_600_000 - 5);
  });
});

describe('viewer locale', () => {
  it('is the browser\'s own for the console\'s language', () => {
    expect(viewerLocale('en', ['en-US', 'fr'])).toBe('en-US');
    expect(viewerLocale('en', ['fr-FR', 'en-AU'])).toBe('en-AU');
    expect(viewerLocale('zh', ['en-US', 'zh-TW'])).toBe('zh-TW');
    expect(viewerLocale('en', ['fr-FR'])).toBe('en-GB');
    expect(viewerLocale('zh', [])).toBe('zh-CN');
  });
});
