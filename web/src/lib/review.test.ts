import { describe, expect, it } from 'vitest';
import { cell, DEFAULT_REVIEW_FILTER, evidenceParts, parseJsonInput, parseReviewFilter, queueWhere, reviewFilterToSearch, reviewLiveWhere, reviewVariables } from './review';

describe('review filter', () => {
  it('round-trips through the URL', () => {
    const f = { ...DEFAULT_REVIEW_FILTER, type: 'import', tenant: 'acme', age: '24h' as const, after: 'c1', page: 3, open: '42' };
    const search = reviewFilterToSearch(f);
    expect(parseReviewFilter(new URLSearchParams(search.slice(1)))).toEqual(f);
    expect(reviewFilterToSearch(DEFAULT_REVIEW_FILTER)).toBe('');
  });
  it('drops what it does not know', () => {
    const f = parseReviewFilter(new URLSearchParams('age=3y&page=-2'));
    expect(f.age).toBe('');
    expect(f.page).toBe(1);
  });
  it('asks the queue by type, tenant and age in seconds', () => {
    expect(queueWhere(DEFAULT_REVIEW_FILTER)).toBeNull();
    expect(queueWhere({ type: 'import', tenant: ' acme ', age: '1h' })).toEqual({ type: 'import', tenant: 'acme', olderThanSeconds: 3600 });
    expect(queueWhere({ type: '', tenant: '', age: '7d' })).toEqual({ olderThanSeconds: 7 * 86400 });
  });
  it('pages forward after a cursor and backward before one', () => {
    expect(reviewVariables({ ...DEFAULT_REVIEW_FILTER, after: 'a' }, 20)).toEqual({ where: null, first: 20, after: 'a' });
    expect(reviewVariables({ ...DEFAULT_REVIEW_FILTER, before: 'b' }, 20)).toEqual({ where: null, last: 20, before: 'b' });
  });
  it('watches the items on screen and the tasks entering review', () => {
    expect(reviewLiveWhere({ ...DEFAULT_REVIEW_FILTER, type: 'import' }, [])).toEqual({ status: 'REVIEW_PENDING', type: 'import' });
    expect(reviewLiveWhere(DEFAULT_REVIEW_FILTER, ['1', '2'])).toEqual({ or: [{ idIn: ['1', '2'] }, { status: 'REVIEW_PENDING' }] });
  });
});

describe('evidenceParts', () => {
  it('reads counts, failed rows and the error report of an import', () => {
    const p = evidenceParts({
      totalCount: 5,
      failedCount: 4,
      reportFile: 'reports/1.xlsx',
      failedRows: [
        { row: 3, errors: ['name: required'] },
        { row: 4, errors: ['email: not an address'] },
      ],
      mapping: { name: 'A' },
    });
    expect(p.counts).toEqual([
      ['totalCount', 5],
      ['failedCount', 4],
    ]);
    expect(p.rowsKey).toBe('failedRows');
    expect(p.columns).toEqual(['row', 'errors']);
    expect(p.moreRows).toBe(2);
    expect(p.hasReport).toBe(true);
    expect(p.rest).toEqual({ mapping: { name: 'A' } });
    expect(cell(p.rows[0].errors)).toBe('name: required');
  });
  it('shows any other value as it is', () => {
    expect(evidenceParts(null).raw).toBeNull();
    expect(evidenceParts('a difference of 3.50').raw).toBe('a difference of 3.50');
    expect(evidenceParts([1, 2]).raw).toEqual([1, 2]);
  });
});

describe('parseJsonInput', () => {
  it('parses, or says why not', () => {
    expect(parseJsonInput('{"a": 1}')).toEqual({ ok: true, value: { a: 1 } });
    expect(parseJsonInput('  ')).toEqual({ ok: false, message: 'empty' });
    const bad = parseJsonInput('{"a": }');
    expect(bad.ok).toBe(false);
  });
});
