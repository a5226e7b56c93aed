// Payload filters of the task list: conditions on a path of a task's
// (masked) input or its result, kept in the URL (?payload=...) with the
// other filters, and turned into TaskWhereInput's input/result lists.

export type PayloadOn = 'input' | 'result';
export type PayloadOp = 'eq' | 'prefix' | 'exists' | 'missing';
export const PAYLOAD_OPS: PayloadOp[] = ['eq', 'prefix', 'exists', 'missing'];

export interface PayloadCond {
  on: PayloadOn;
  path: string;
  op: PayloadOp;
  // The text typed; eq compares it as a number or a boolean when the
  // schema says so (or, without a schema, when it reads as one).
  value: string;
  kind?: 'string' | 'number' | 'boolean';
}

// The server's rule (store.ParsePath), checked here so a typo shows at once.
const KEY = /^[A-Za-z_][A-Za-z0-9_-]*$/;
export function validPath(p: string): boolean {
  if (!p || p.length > 200) return false;
  const keys = p.split('.');
  return keys.length <= 8 && keys.every((k) => KEY.test(k));
}

export function decodePayload(s: string | null | undefined): PayloadCond[] {
  if (!s) return [];
  try {
    const v = JSON.parse(s);
    if (!Array.isArray(v)) return [];
    return v.filter(
      (c): c is PayloadCond =>
        c && (c.on === 'input' || c.on === 'result') && typeof c.path === 'string' && PAYLOAD_OPS.includes(c.op) && typeof c.value === 'string',
    );
  } catch {
    return [];
  }
}

export function encodePayload(conds: PayloadCond[]): string {
  return conds.length ? JSON.stringify(conds) : '';
}

function eqValue(c: PayloadCond): string | number | boolean {
  const v = c.value;
  const kind = c.kind ?? (v === 'true' || v === 'false' ? 'boolean' : /^-?\d+(\.\d+)?$/.test(v) ? 'number' : 'string');
  if (kind === 'boolean' && (v === 'true' || v === 'false')) return v === 'true';
  if (kind === 'number' && v.trim() !== '' && !Number.isNaN(Number(v))) return Number(v);
  return v;
}

export function payloadWhere(conds: PayloadCond[]): Record<string, unknown> {
  const w: Record<string, unknown[]> = {};
  for (const c of conds) {
    let p: Record<string, unknown>;
    if (c.op === 'eq') p = { path: c.path, eq: eqValue(c) };
    else if (c.op === 'prefix') p = { path: c.path, prefix: c.value };
    else p = { path: c.path, exists: c.op === 'exists' };
    (w[c.on] ??= []).push(p);
  }
  return w;
}

export interface SchemaPath {
  path: string;
  kind?: 'string' | 'number' | 'boolean';
}

// schemaPaths lists the paths a JSON schema describes (objects' properties,
// depth first), with the type of the leaves, to suggest in the filter.
export function schemaPaths(schema: unknown, prefix = '', depth = 0): SchemaPath[] {
  if (!schema || typeof schema !== 'object' || depth >= 8) return [];
  const props = (schema as { properties?: Record<string, unknown> }).properties;
  if (!props || typeof props !== 'object') return [];
  const out: SchemaPath[] = [];
  for (const [k, sub] of Object.entries(props)) {
    const path = prefix ? `${prefix}.${k}` : k;
    if (!validPath(path)) continue;
    const t = (sub as { type?: unknown })?.type;
    const type = Array.isArray(t) ? t.find((x) => x !== 'null') : t;
    const kind = type === 'string' ? 'string' : type === 'integer' || type === 'number' ? 'number' : type === 'boolean' ? 'boolean' : undefined;
    out.push({ path, kind });
    if (type === 'object' || (sub as { properties?: unknown })?.properties) out.push(...schemaPaths(sub, path, depth + 1));
  }
  return out;
}
