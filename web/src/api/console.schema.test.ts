// The history, trend, deadline, tenant, access and schedule documents the console
// sends, validated against the API's schema as the repository defines it
// (as review.schema.test.ts does for the review documents).
import { buildASTSchema, concatAST, parse, validate, type DocumentNode } from 'graphql';
import { describe, expect, it } from 'vitest';
import { TASK_COST } from '../components/Cost';
import { DEADLINE_REPORT } from '../components/Deadlines';
import { TASK_HISTORY, typeTrendsQuery } from '../lib/history';
import { SET_TENANT_QUOTA, TENANT_QUOTAS } from '../pages/Tenants';
import { RUNNING_BY_TENANT } from '../pages/Dashboard';
import { VIEWER } from './access';
import { CREATE_SCHEDULE, RUN_SCHEDULE_WORKFLOW_NOW, SCHEDULE, SCHEDULES } from './queries';

interface Fs {
  readFileSync(p: string, enc: 'utf8'): string;
  readdirSync(p: string): string[];
}
const fsName = 'node:fs';
const fs = (await import(/* @vite-ignore */ fsName)) as Fs;

function schema() {
  const root = (globalThis as unknown as { process: { cwd(): string } }).process.cwd() + '/..';
  const files = [`${root}/ent/ent.graphql`, `${root}/schema.graphql`];
  const dir = `${root}/graph/schema`;
  for (const f of fs.readdirSync(dir).sort()) if (f.endsWith('.graphql')) files.push(`${dir}/${f}`);
  return buildASTSchema(concatAST(files.map((f) => parse(fs.readFileSync(f, 'utf8')))), { assumeValidSDL: true });
}

describe('console documents', () => {
  const s = schema();
  const docs: [string, DocumentNode][] = [
    ['TASK_HISTORY', parse(TASK_HISTORY)],
    ['typeTrendsQuery(0)', parse(typeTrendsQuery(0))],
    ['typeTrendsQuery(3)', parse(typeTrendsQuery(3))],
    ['TENANT_QUOTAS', TENANT_QUOTAS],
    ['SET_TENANT_QUOTA', SET_TENANT_QUOTA],
    ['VIEWER', VIEWER],
    ['DEADLINE_REPORT', DEADLINE_REPORT],
    ['TASK_COST', TASK_COST],
    ['RUNNING_BY_TENANT', parse(RUNNING_BY_TENANT)],
    ['SCHEDULES', SCHEDULES],
    ['SCHEDULE', SCHEDULE],
    ['CREATE_SCHEDULE', CREATE_SCHEDULE],
    ['RUN_SCHEDULE_WORKFLOW_NOW', RUN_SCHEDULE_WORKFLOW_NOW],
  ];
  for (const [name, doc] of docs) {
    it(`${name} validates against the schema`, () => {
      expect(validate(s, doc).map((e) => e.message)).toEqual([]);
    });
  }
});
