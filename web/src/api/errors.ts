// Turning API errors into sentences an operator can act on. The server puts
// a machine-readable code in extensions.code (ARCHITECTURE.md, "API and
// clients"; graph/errors.go); the console maps
// each code to a translated message and keeps the server's own message as
// the detail.
import type { CombinedError } from '@urql/core';
import type { MessageKey, Translate } from '../i18n';

export interface ApiError {
  code: string;
  message: string;
  extensions: Record<string, unknown>;
}

export const KNOWN_CODES = [
  'NOT_FOUND',
  'VALIDATION',
  'INVALID_TRANSITION',
  'CONFLICT',
  'INTERNAL',
  'UNAUTHENTICATED',
  'FORBIDDEN',
  'UNAVAILABLE',
  'GRAPHQL_VALIDATION_FAILED',
] as const;

interface GraphQLErrorLike {
  message: string;
  extensions?: Record<string, unknown> | null;
}

// fromGraphQLErrors reads the errors of a raw GraphQL response.
export function fromGraphQLErrors(errors: readonly GraphQLErrorLike[]): ApiError[] {
  return errors.map((e) => {
    const extensions = (e.extensions ?? {}) as Record<string, unknown>;
    const code = typeof extensions.code === 'string' ? extensions.code : 'UNKNOWN';
    return { code, message: e.message, extensions };
  });
}

// fromCombined reads an urql error: GraphQL errors first, then the network.
export function fromCombined(err: CombinedError | undefined | null): ApiError[] {
  if (!err) return [];
  if (err.graphQLErrors.length > 0) return fromGraphQLErrors(err.graphQLErrors);
  const status = (err.response as { status?: number } | undefined)?.status;
  if (status === 401) return [{ code: 'UNAUTHENTICATED', message: err.message, extensions: {} }];
  if (status === 403) return [{ code: 'FORBIDDEN', message: err.message, extensions: {} }];
  return [{ code: 'NETWORK', message: err.networkError?.message ?? err.message, extensions: {} }];
}

export function hasCode(err: CombinedError | undefined | null, code: string): boolean {
  return fromCombined(err).some((e) => e.code === code);
}

// describe returns a headline (translated, from the code) and the server's
// detail lines (validation problems, the raw message).
export function describe(e: ApiError, t: Translate): { title: string; details: string[] } {
  const ext = e.extensions;
  const key = `err.${e.code}` as MessageKey;
  const known = (KNOWN_CODES as readonly string[]).includes(e.code) || e.code === 'NETWORK';
  const title = known
    ? t(key, {
        from: ext.from ? t(`status.${String(ext.from)}` as MessageKey) : '?',
        to: ext.to ? t(`status.${String(ext.to)}` as MessageKey) : '?',
        reference: String(ext.reference ?? '?'),
      })
    : t('err.UNKNOWN');
  const details: string[] = [];
  const problems = ext.problems;
  if (Array.isArray(problems) && problems.length > 0) {
    for (const p of problems) details.push(problemText(p));
  } else if (e.code !== 'INTERNAL' && e.message) {
    // The INTERNAL message only repeats the reference; others add context.
    details.push(e.message);
  }
  return { title, details };
}

interface Problem {
  field?: string;
  message?: string;
}

function problemText(p: unknown): string {
  if (typeof p === 'string') return p;
  const { field, message } = (p ?? {}) as Problem;
  if (message) return field ? `${field}: ${message}` : message;
  return JSON.stringify(p);
}

// fieldProblems maps VALIDATION problems ({field, message}) to form fields.
// Problems of the task input name the property inside the message, as
// "at /sleepMs: minimum: got -1, want 0" (JSON Schema) or "url: scheme must
// be http" (the type's own check); they map to "input.<property>". A problem
// of the input as a whole maps to "input".
export function fieldProblems(errors: ApiError[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of errors) {
    if (e.code !== 'VALIDATION' || !Array.isArray(e.extensions.problems)) continue;
    for (const raw of e.extensions.problems) {
      const { field, message } = (typeof raw === 'string' ? { message: raw } : (raw ?? {})) as Problem;
      if (!message) continue;
      if (field === 'input') {
        const m = /^at \/([^/:\s]+)[^:]*:\s*(.+)$/.exec(message) ?? /^([A-Za-z_]\w*):\s*(.+)$/.exec(message);
        if (m) {
          out[`input.${m[1]}`] = m[2];
          continue;
        }
      }
      const key = field || '_';
      out[key] = out[key] ? `${out[key]}; ${message}` : message;
    }
  }
  return out;
}
