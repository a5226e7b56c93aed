import { describe, expect, it } from 'vitest';
import { DEFAULT_FILTER, filterToSearch, parseFilter, toWhere } from './filters';
import { decodePayload, encodePayload, payloadWhere, schemaPaths, validPath, type PayloadCond } from './payload';

describe('payload filters', () => {
  it('turn conditions into TaskWhereInput lists', () => {
    const conds: PayloadCond[] = [
      { on: 'input', path: 'customer.city', op: 'eq', value: 'Shanghai' },
      { on: 'input', path: 'customer.age', op: 'eq', value: '41', kind: 'number' },
      { on: 'input', path: 'zip', op: 'eq', value: '0101', kind: 'string' },
      { on: 'result', path: 'shipment.ref', op: 'prefix', value: 'B-' },
      { on: 'result', path: 'error', op: 'missing', value: '' },
      { on: 'input', path: 'vip', op: 'eq', value: 'true' },
    ];
    expect(payloadWhere(conds)).toEqual({
      input: [
        { path: 'customer.city', eq: 'Shanghai' },
        { path: 'customer.age', eq: 41 },
        { path: 'zip', eq: '0101' },
        { path: 'vip', eq: true },
      ],
      result: [
        { path: 'shipment.ref', prefix: 'B-' },
        { path: 'error', exists: false },
      ],
    });
  });

  it('round-trip through the URL with the other filters', () => {
    const payload = encodePayload([{ on: 'input', path: 'a.b', op: 'exists', value: '' }]);
    const f = { ...DEFAULT_FILTER, type: 'order', payload };
    const back = parseFilter(new URLSearchParams(filterToSearch(f).slice(1)));
    expect(back.payload).toBe(payload);
    expect(toWhere(back)).toEqual({ type: 'order', input: [{ path: 'a.b', exists: true }] });
    expect(decodePayload('not json')).toEqual([]);
    expect(decodePayload('[{"on":"elsewhere","path":"a","op":"eq","value":"x"}]')).toEqual([]);
  });

  it('check paths as the server does', () => {
    expect(validPath('customer.home_city.zip-code')).toBe(true);
    for (const bad of ['', 'a.', '1a', 'a b', 'a.b.c.d.e.f.g.h.i']) expect(validPath(bad)).toBe(false);
  });

  it('suggest the paths of an input schema', () => {
    const schema = {
      type: 'object',
      properties: { ref: { type: 'string' }, customer: { type: 'object', properties: { city: { type: 'string' }, age: { type: 'integer' }, vip: { type: ['boolean', 'null'] } } } },
    };
    expect(schemaPaths(schema)).toEqual([
      { path: 'ref', kind: 'string' },
      { path: 'customer', kind: undefined },
      { path: 'customer.city', kind: 'string' },
      { path: 'customer.age', kind: 'number' },
      { path: 'customer.vip', kind: 'boolean' },
    ]);
    expect(schemaPaths(null)).toEqual([]);
  });
});
