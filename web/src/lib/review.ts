// The review queue's filters live in the URL, like the task list's: type,
// tenant, age (how long an item has waited at least) and the Relay cursor.
// Pure functions here, so that they are tested without a browser.

export const REVIEW_PAGE_SIZE = 20;
export const AGES = ['1h', '24h', '7d'] as const;
export type AgePreset = (typeof AGES)[number];
export const AGE_MS: Record<AgePreset, number> = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };

export interface ReviewFilter {
  type: string;
  tenant: string;
  // age: only items waiting at least this long (the server counts from
  // its own clock: olderThanSeconds).
  age: AgePreset | '';
  after: string;
  before: string;
  page: number;
  // open is the item whose evidence is shown.
  open: string;
}

export const DEFAULT_REVIEW_FILTER: ReviewFilter = { type: '', tenant: '', age: '', after: '', before: '', page: 1, open: '' };

export function parseReviewFilter(p: URLSearchParams): ReviewFilter {
  const age = p.get('age') ?? '';
  return {
    type: p.get('type') ?? '',
    tenant: p.get('tenant') ?? '',
    age: (AGES as readonly string[]).includes(age) ? (age as AgePreset) : '',
    after: p.get('after') ?? '',
    before: p.get('before') ?? '',
    page: Math.max(1, Math.floor(Number(p.get('page')) || 1)),
    open: p.get('open') ?? '',
  };
}

export function reviewFilterToSearch(f: ReviewFilter): string {
  const p = new URLSearchParams();
  if (f.type) p.set('type', f.type);
  if (f.tenant) p.set('tenant', f.tenant);
  if (f.age) p.set('age', f.age);
  if (f.after) p.set('after', f.after);
  else if (f.before) p.set('before', f.before);
  if ((f.after || f.before) && f.page > 1) p.set('page', String(f.page));
  if (f.open) p.set('open', f.open);
  const s = p.toString();
  return s ? '?' + s : '';
}

export type Where = Record<string, unknown>;

// queueWhere is the filter as the API's ReviewQueueWhere (null: the whole
// queue), shared by the queue, its stats and the bulk actions.
export function queueWhere(f: Pick<ReviewFilter, 'type' | 'tenant' | 'age'>): Where | null {
  const w: Where = {};
  if (f.type) w.type = f.type;
  if (f.tenant.trim()) w.tenant = f.tenant.trim();
  if (f.age) w.olderThanSeconds = AGE_MS[f.age] / 1000;
  return Object.keys(w).length ? w : null;
}

// reviewVariables are the queue query's variables, paged the Relay way.
export function reviewVariables(f: ReviewFilter, size = REVIEW_PAGE_SIZE) {
  const where = queueWhere(f);
  if (f.before) return { where, last: size, before: f.before };
  return { where, first: size, after: f.after || null };
}

// reviewLiveWhere is the TaskWhereInput the page subscribes to: changes
// of the items on screen (one that leaves review must leave the page, at
// once) and tasks that enter review of the filtered type and tenant (the
// age is the server's to judge: the page reads the queue again).
export function reviewLiveWhere(f: ReviewFilter, visibleIds: string[]): Where {
  const w: Where = { status: 'REVIEW_PENDING' };
  if (f.type) w.type = f.type;
  if (f.tenant.trim()) w.tenant = f.tenant.trim();
  if (visibleIds.length === 0) return w;
  return { or: [{ idIn: visibleIds }, w] };
}

// FieldChange is one line of an input version's diff, as the API gives it:
// a masked field says that it changed, never what it was or became.
export interface FieldChange {
  path: string;
  kind: 'ADDED' | 'REMOVED' | 'CHANGED';
  masked: boolean;
  before: unknown;
  after: unknown;
}

// shownValue is what the diff prints for one side of a change.
export function shownValue(v: unknown): string {
  if (v === undefined || v === null) return '—';
  return JSON.stringify(v);
}

// parseJsonInput reads the edit box: the parsed value, or the parser's
// message for an inline error (the server validates the rest).
export function parseJsonInput(text: string): { ok: true; value: unknown } | { ok: false; message: string } {
  if (!text.trim()) return { ok: false, message: 'empty' };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, message: e instanceof Error ? e.message : String(e) };
  }
}

// Evidence is what a handler left for the reviewer, any JSON (masked by
// the server). evidenceParts reads the shapes worth showing as such: its
// counts, a list of failed rows (the first array of objects), whether it
// names an error report; everything else is shown as JSON.
export interface EvidenceParts {
  counts: [string, number][];
  rowsKey: string;
  rows: Record<string, unknown>[];
  columns: string[];
  moreRows: number;
  hasReport: boolean;
  rest: Record<string, unknown> | null;
  raw: unknown;
}

const MAX_ROWS = 50;
const MAX_COLUMNS = 6;

export function evidenceParts(evidence: unknown): EvidenceParts {
  const out: EvidenceParts = { counts: [], rowsKey: '', rows: [], columns: [], moreRows: 0, hasReport: false, rest: null, raw: null };
  if (evidence === null || evidence === undefined) return out;
  if (typeof evidence !== 'object' || Array.isArray(evidence)) {
    out.raw = evidence;
    return out;
  }
  const rest: Record<string, unknown> = {};
  let failed = 0;
  for (const [k, v] of Object.entries(evidence as Record<string, unknown>)) {
    if (typeof v === 'number' && Number.isFinite(v)) {
      out.counts.push([k, v]);
      if (/^failed(Count|Rows)?$/i.test(k)) failed = v;
    } else if (!out.rowsKey && Array.isArray(v) && v.length > 0 && v.every((r) => r && typeof r === 'object' && !Array.isArray(r))) {
      out.rowsKey = k;
      const all = v as Record<string, unknown>[];
      out.rows = all.slice(0, MAX_ROWS);
      const cols: string[] = [];
      for (const r of out.rows) for (const c of Object.keys(r)) if (!cols.includes(c)) cols.push(c);
      out.columns = cols.slice(0, MAX_COLUMNS);
      out.moreRows = all.length - out.rows.length;
    } else if (/report/i.test(k) && typeof v === 'string' && v) {
      out.hasReport = true;
    } else {
      rest[k] = v;
    }
  }
  // A count of failed rows larger than the rows given: the rest are in the report.
  if (out.rowsKey && failed > out.rows.length + out.moreRows) out.moreRows = failed - out.rows.length;
  if (Object.keys(rest).length) out.rest = rest;
  return out;
}

// cell prints one value of a failed row.
export function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v.join('; ');
  return JSON.stringify(v);
}
