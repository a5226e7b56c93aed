// Launch forms are generated from a task type's input JSON Schema (the
// subset that the server's types produce: flat objects of strings, numbers,
// booleans, enums, string maps and free JSON). What the form cannot model
// is edited as JSON, so every schema can still be launched.
import type { MessageKey, Vars } from '../i18n';

export type FieldKind = 'string' | 'url' | 'enum' | 'integer' | 'number' | 'boolean' | 'map' | 'json';

export interface FieldSpec {
  name: string;
  kind: FieldKind;
  required: boolean;
  description: string;
  options: string[];
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  defaultValue?: unknown;
}

export type KeyValue = { key: string; value: string };
export type FieldValue = string | boolean | KeyValue[];
export type FormValues = Record<string, FieldValue>;
export type FieldError = { key: MessageKey; vars?: Vars };

type Schema = Record<string, unknown>;

function kindOf(s: Schema): FieldKind {
  const type = s.type;
  if (Array.isArray(s.enum) && s.enum.every((v) => typeof v === 'string')) return 'enum';
  if (type === 'string') return s.format === 'uri' || s.format === 'url' ? 'url' : 'string';
  if (type === 'integer') return 'integer';
  if (type === 'number') return 'number';
  if (type === 'boolean') return 'boolean';
  if (type === 'object' && !s.properties) {
    const ap = s.additionalProperties as Schema | undefined;
    if (ap && typeof ap === 'object' && ap.type === 'string') return 'map';
  }
  return 'json';
}

export function fieldsOf(schema: unknown): FieldSpec[] {
  const s = (schema ?? {}) as Schema;
  const props = (s.properties ?? {}) as Record<string, Schema>;
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  return Object.entries(props).map(([name, p]) => ({
    name,
    kind: kindOf(p ?? {}),
    required: required.has(name),
    description: typeof p?.description === 'string' ? p.description : '',
    options: Array.isArray(p?.enum) ? (p.enum as unknown[]).map(String) : [],
    minimum: typeof p?.minimum === 'number' ? p.minimum : undefined,
    maximum: typeof p?.maximum === 'number' ? p.maximum : undefined,
    maxLength: typeof p?.maxLength === 'number' ? p.maxLength : undefined,
    defaultValue: p?.default,
  }));
}

// canUseForm is false for schemas the generated form would misrepresent.
export function canUseForm(schema: unknown): boolean {
  const s = (schema ?? {}) as Schema;
  return s.type === 'object' || !!s.properties || Object.keys(s).length === 0;
}

export function emptyValues(fields: FieldSpec[]): FormValues {
  return Object.fromEntries(fields.map((f) => [f.name, f.kind === 'boolean' ? false : f.kind === 'map' ? [] : '']));
}

// buildInput turns the form's text values into the task input, and says
// what is wrong per field. Empty optional fields are left out, so that the
// server applies its defaults.
export function buildInput(fields: FieldSpec[], values: FormValues): { input: Record<string, unknown>; errors: Record<string, FieldError> } {
  const input: Record<string, unknown> = {};
  const errors: Record<string, FieldError> = {};
  for (const f of fields) {
    const v = values[f.name];
    if (f.kind === 'boolean') {
      if (v === true) input[f.name] = true;
      else if (f.required) input[f.name] = false;
      continue;
    }
    if (f.kind === 'map') {
      const pairs = (Array.isArray(v) ? v : []).filter((p) => p.key.trim() !== '');
      if (pairs.length) input[f.name] = Object.fromEntries(pairs.map((p) => [p.key.trim(), p.value]));
      else if (f.required) errors[f.name] = { key: 'launch.required' };
      continue;
    }
    const text = typeof v === 'string' ? v : '';
    if (text.trim() === '') {
      if (f.required) errors[f.name] = { key: 'launch.required' };
      continue;
    }
    switch (f.kind) {
      case 'integer':
      case 'number': {
        const n = Number(text);
        if (!Number.isFinite(n)) errors[f.name] = { key: 'launch.notNumber' };
        else if (f.kind === 'integer' && !Number.isInteger(n)) errors[f.name] = { key: 'launch.notInteger' };
        else if (f.minimum !== undefined && n < f.minimum) errors[f.name] = { key: 'launch.min', vars: { n: f.minimum } };
        else if (f.maximum !== undefined && n > f.maximum) errors[f.name] = { key: 'launch.max', vars: { n: f.maximum } };
        else input[f.name] = n;
        break;
      }
      case 'json':
        try {
          input[f.name] = JSON.parse(text);
        } catch (e) {
          errors[f.name] = { key: 'launch.badJson', vars: { msg: (e as Error).message } };
        }
        break;
      case 'url':
        if (!/^https?:\/\/[^\s/]+/i.test(text.trim())) errors[f.name] = { key: 'launch.badUrl' };
        else input[f.name] = text.trim();
        break;
      default:
        if (f.maxLength !== undefined && text.length > f.maxLength) errors[f.name] = { key: 'launch.maxLength', vars: { n: f.maxLength } };
        else input[f.name] = text;
    }
  }
  return { input, errors };
}
