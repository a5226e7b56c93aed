// The layout of a workflow's picture, by dagre (a layered DAG layout:
// ranks top to bottom, crossings reduced, edges routed around nodes). The
// console only chooses which steps are drawn and the size of a node.
import { Graph, layout } from '@dagrejs/dagre';

// At most this many steps are drawn: dagre's layout grows faster than
// linearly, and a picture of thousands of boxes reads as nothing. The
// first steps in creation order are drawn (a step is created after its
// parents, so every drawn step's parents are drawn too); the page says
// how many are left out and lists the failed ones among them.
export const MAX_DRAWN = 300;

export const NODE_W = 168;
export const NODE_H = 52;

export interface Point {
  x: number;
  y: number;
}

export interface PlacedNode {
  id: string;
  // The node's top left corner.
  x: number;
  y: number;
}

export interface PlacedEdge {
  from: string;
  to: string;
  points: Point[];
}

export interface DagLayout {
  nodes: PlacedNode[];
  edges: PlacedEdge[];
  width: number;
  height: number;
}

// drawnSteps returns the steps the picture draws: the first max in
// creation order (ids ascend with creation).
export function drawnSteps<T extends { id: string }>(steps: T[], max = MAX_DRAWN): T[] {
  if (steps.length <= max) return steps;
  return [...steps].sort((a, b) => Number(a.id) - Number(b.id)).slice(0, max);
}

// layoutDag places ids and the edges among them (parent → child); an edge
// to or from an id not in ids is left out.
export function layoutDag(ids: string[], edges: [string, string][]): DagLayout {
  const g = new Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 48, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  const known = new Set(ids);
  for (const id of ids) g.setNode(id, { width: NODE_W, height: NODE_H });
  for (const [from, to] of edges) if (known.has(from) && known.has(to)) g.setEdge(from, to);
  layout(g);
  const nodes = ids.map((id) => {
    const n = g.node(id);
    return { id, x: n.x - NODE_W / 2, y: n.y - NODE_H / 2 };
  });
  const placed = g.edges().map((e) => ({ from: e.v, to: e.w, points: (g.edge(e).points ?? []) as Point[] }));
  const gl = g.graph();
  return { nodes, edges: placed, width: Math.ceil(gl.width ?? 0), height: Math.ceil(gl.height ?? 0) };
}

// edgePath is an SVG path through an edge's points.
export function edgePath(points: Point[]): string {
  return points.map((p, i) => `${i === 0 ? 'M' : 'L'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ');
}

// mergeSteps keeps, of each step, the newer (by version) of what a query
// read and what the subscription said: an answer read before a change
// can arrive after the event of that change.
export function mergeSteps<T extends { id: string; version: number }>(fromQuery: T[], live: Map<string, T>): T[] {
  return fromQuery.map((s) => {
    const l = live.get(s.id);
    return l && l.version > s.version ? l : s;
  });
}

// countByStatus counts steps by status.
export function countByStatus(steps: { status: string }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of steps) out[s.status] = (out[s.status] ?? 0) + 1;
  return out;
}
