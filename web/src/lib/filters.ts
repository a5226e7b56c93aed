// The task list's filters live in the URL (so that a filtered view can be
// bookmarked and shared) and become the tasks query's variables here.
import { STATUSES, type TaskStatus } from '../api/queries';
import { decodePayload, encodePayload, payloadWhere } from './payload';

export const SORT_FIELDS = ['CREATED_AT', 'UPDATED_AT', 'FINISHED_AT', 'STATUS', 'TYPE', 'PRIORITY', 'OWNER'] as const;
export type SortField = (typeof SORT_FIELDS)[number];
export type Direction = 'ASC' | 'DESC';
export const PAGE_SIZES = [20, 50, 100] as const;
export const RANGES = ['1h', '24h', '7d'] as const;
export type RangePreset = (typeof RANGES)[number];
const RANGE_MS: Record<RangePreset, number> = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };

export interface ListFilter {
  statuses: TaskStatus[];
  type: string;
  owner: string;
  q: string;
  range: RangePreset | 'custom' | '';
  from: string; // ISO or ''
  to: string; // ISO or ''
  // payload: conditions on the tasks' input or result (lib/payload), encoded.
  payload: string;
  sort: SortField;
  dir: Direction;
  size: number;
  after: string;
  before: string;
  // page is the 1-based page number, for "21–40 of 134": cursors do not
  // tell an offset.
  page: number;
}

export const DEFAULT_FILTER: ListFilter = {
  statuses: [],
  type: '',
  owner: '',
  q: '',
  range: '',
  from: '',
  to: '',
  payload: '',
  sort: 'CREATED_AT',
  dir: 'DESC',
  size: 20,
  after: '',
  before: '',
  page: 1,
};

export function parseFilter(p: URLSearchParams): ListFilter {
  const statuses = (p.get('status') ?? '')
    .split(',')
    .filter((s): s is TaskStatus => (STATUSES as string[]).includes(s));
  const sort = (SORT_FIELDS as readonly string[]).includes(p.get('sort') ?? '') ? (p.get('sort') as SortField) : DEFAULT_FILTER.sort;
  const dir = p.get('dir') === 'ASC' ? 'ASC' : 'DESC';
  const size = Number(p.get('size'));
  const range = p.get('range') ?? '';
  return {
    statuses,
    type: p.get('type') ?? '',
    owner: p.get('owner') ?? '',
    q: p.get('q') ?? '',
    range: (RANGES as readonly string[]).includes(range) || range === 'custom' ? (range as ListFilter['range']) : '',
    from: p.get('from') ?? '',
    to: p.get('to') ?? '',
    payload: encodePayload(decodePayload(p.get('payload'))),
    sort,
    dir,
    size: (PAGE_SIZES as readonly number[]).includes(size) ? size : DEFAULT_FILTER.size,
    after: p.get('after') ?? '',
    before: p.get('before') ?? '',
    page: Math.max(1, Math.floor(Number(p.get('page')) || 1)),
  };
}

export function filterToSearch(f: ListFilter): string {
  const p = new URLSearchParams();
  if (f.statuses.length) p.set('status', f.statuses.join(','));
  if (f.type) p.set('type', f.type);
  if (f.owner) p.set('owner', f.owner);
  if (f.q) p.set('q', f.q);
  if (f.range) p.set('range', f.range);
  if (f.from) p.set('from', f.from);
  if (f.to) p.set('to', f.to);
  if (f.payload) p.set('payload', f.payload);
  if (f.sort !== DEFAULT_FILTER.sort) p.set('sort', f.sort);
  if (f.dir !== DEFAULT_FILTER.dir) p.set('dir', f.dir);
  if (f.size !== DEFAULT_FILTER.size) p.set('size', String(f.size));
  if (f.after) p.set('after', f.after);
  else if (f.before) p.set('before', f.before);
  if ((f.after || f.before) && f.page > 1) p.set('page', String(f.page));
  const s = p.toString();
  return s ? '?' + s : '';
}

// withRange resolves a preset to a fixed "from" at the moment it is chosen,
// so that the query's variables (and its cache key) stay put afterwards.
export function withRange(f: ListFilter, range: ListFilter['range'], now: number): ListFilter {
  if (range === '') return { ...f, range: '', from: '', to: '', after: '', before: '', page: 1 };
  if (range === 'custom') return { ...f, range, after: '', before: '', page: 1 };
  return { ...f, range, from: new Date(now - RANGE_MS[range]).toISOString(), to: '', after: '', before: '', page: 1 };
}

export type Where = Record<string, unknown>;

export function toWhere(f: ListFilter): Where {
  const w: Where = {};
  if (f.statuses.length === 1) w.status = f.statuses[0];
  else if (f.statuses.length > 1) w.statusIn = f.statuses;
  if (f.type) w.type = f.type;
  if (f.owner.trim()) w.owner = f.owner.trim();
  if (f.q.trim()) w.search = f.q.trim();
  if (f.from) w.createdAtGTE = f.from;
  if (f.to) w.createdAtLTE = f.to;
  Object.assign(w, payloadWhere(decodePayload(f.payload)));
  return w;
}

export function toVariables(f: ListFilter) {
  const where = toWhere(f);
  const orderBy = [{ field: f.sort, direction: f.dir }];
  const base = { orderBy, where: Object.keys(where).length ? where : null };
  if (f.before) return { ...base, last: f.size, before: f.before };
  return { ...base, first: f.size, after: f.after || null };
}

// liveWhere is what the list subscribes to: changes of the rows on screen
// (even once they stop matching, so that their chips stay true), and new
// tasks that match the filter.
// null means every task (the server rejects an empty where).
export function liveWhere(f: ListFilter, visibleIds: string[]): Where | null {
  const where = toWhere(f);
  if (Object.keys(where).length === 0) return null; // every task: the rows on screen included
  if (visibleIds.length === 0) return where;
  return { or: [{ idIn: visibleIds }, where] };
}

// autoRefreshes: whether a new matching task would land on the page
// shown (the first page, newest first), so the page refreshes on its own.
export function autoRefreshes(f: ListFilter): boolean {
  return !f.after && !f.before && f.sort === 'CREATED_AT' && f.dir === 'DESC';
}
