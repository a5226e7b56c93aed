import { describe, expect, it } from 'vitest';
import { countByStatus, drawnSteps, edgePath, layoutDag, mergeSteps, NODE_H } from './dag';
import { parseWorkflowFilter, workflowSearch, workflowVariables } from '../pages/Workflows';
import { stepsWhere } from '../pages/WorkflowDetail';

describe('layoutDag (dagre)', () => {
  it('puts a diamond in three ranks, parents above children, with its four edges', () => {
    const l = layoutDag(['1', '2', '3', '4'], [
      ['1', '2'],
      ['1', '3'],
      ['2', '4'],
      ['3', '4'],
    ]);
    const y = Object.fromEntries(l.nodes.map((n) => [n.id, n.y]));
    const x = Object.fromEntries(l.nodes.map((n) => [n.id, n.x]));
    expect(y['2']).toBeGreaterThanOrEqual(y['1'] + NODE_H);
    expect(y['2']).toBe(y['3']);
    expect(x['2']).not.toBe(x['3']);
    expect(y['4']).toBeGreaterThanOrEqual(y['2'] + NODE_H);
    expect(l.edges.map((e) => `${e.from}>${e.to}`).sort()).toEqual(['1>2', '1>3', '2>4', '3>4']);
    for (const e of l.edges) expect(e.points.length).toBeGreaterThanOrEqual(2);
    expect(l.width).toBeGreaterThan(0);
    expect(l.height).toBeGreaterThan(0);
  });

  it('leaves out edges to steps not drawn', () => {
    const l = layoutDag(['1', '2'], [
      ['1', '2'],
      ['2', '9'],
    ]);
    expect(l.edges).toHaveLength(1);
  });

  it('draws the first steps in creation order, at most the cap', () => {
    const steps = Array.from({ length: 50 }, (_, i) => ({ id: String(50 - i) }));
    expect(drawnSteps(steps, 10).map((s) => s.id)).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']);
    expect(drawnSteps(steps.slice(0, 3), 10)).toHaveLength(3);
  });

  it('edgePath goes through the points', () => {
    expect(edgePath([{ x: 1, y: 2 }, { x: 3.25, y: 4 }])).toBe('M1.0,2.0 L3.3,4.0');
  });
});

describe('mergeSteps', () => {
  it('keeps the newer of the query and the event, by version', () => {
    const q = [
      { id: '1', version: 3, status: 'SUCCESS' },
      { id: '2', version: 1, status: 'WAITING_DEPENDENCY' },
    ];
    const live = new Map([
      ['1', { id: '1', version: 2, status: 'EXECUTING' }],
      ['2', { id: '2', version: 2, status: 'PENDING' }],
    ]);
    expect(mergeSteps(q, live).map((s) => s.status)).toEqual(['SUCCESS', 'PENDING']);
    expect(countByStatus(mergeSteps(q, live))).toEqual({ SUCCESS: 1, PENDING: 1 });
  });
});

describe('the workflows list filter', () => {
  it('round-trips through the URL and maps to the where input', () => {
    const f = parseWorkflowFilter(new URLSearchParams('q=nightly&owner=alice&page=2&after=abc'));
    expect(workflowSearch(f)).toBe('?q=nightly&owner=alice&after=abc&page=2');
    expect(workflowVariables(f)).toEqual({
      first: 20,
      after: 'abc',
      where: { and: [{ or: [{ codeContainsFold: 'nightly' }, { titleContainsFold: 'nightly' }] }, { ownerEqualFold: 'alice' }] },
    });
    expect(workflowVariables(parseWorkflowFilter(new URLSearchParams('before=xyz')))).toEqual({ last: 20, before: 'xyz', where: null });
  });
});

describe('stepsWhere', () => {
  it('is the range of the ids, of steps only, whatever their number', () => {
    const ids = Array.from({ length: 10000 }, (_, i) => String(101 + i));
    expect(stepsWhere(ids)).toEqual({ idGTE: '101', idLTE: '10100', stepKeyNotNil: true });
    expect(stepsWhere([])).toEqual({ idIn: [] });
  });
});
