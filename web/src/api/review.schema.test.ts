// The review documents the console sends, validated against the API's
// schema as the repository defines it (ent.graphql, schema.graphql,
// graph/schema/*.graphql): a renamed field or argument fails here, not in
// an operator's browser.
import { buildASTSchema, concatAST, parse, validate, type DocumentNode } from 'graphql';
import { describe, expect, it } from 'vitest';
import * as review from './review';

// Node's fs, without the console's types depending on Node's.
interface Fs {
  readFileSync(p: string, enc: 'utf8'): string;
  readdirSync(p: string): string[];
}
const fsName = 'node:fs';
const fs = (await import(/* @vite-ignore */ fsName)) as Fs;

function schema() {
  // Vitest runs in web/: the repository is its parent.
  const root = (globalThis as unknown as { process: { cwd(): string } }).process.cwd() + '/..';
  const files = [`${root}/ent/ent.graphql`, `${root}/schema.graphql`];
  const dir = `${root}/graph/schema`;
  for (const f of fs.readdirSync(dir).sort()) if (f.endsWith('.graphql')) files.push(`${dir}/${f}`);
  return buildASTSchema(concatAST(files.map((f) => parse(fs.readFileSync(f, 'utf8')))), { assumeValidSDL: true });
}

describe('review documents', () => {
  const s = schema();
  const docs = Object.entries(review).filter((e): e is [string, DocumentNode] => typeof e[1] === 'object' && e[1] !== null && (e[1] as DocumentNode).kind === 'Document');
  it('are all checked', () => {
    expect(docs.map(([name]) => name).sort()).toEqual(
      ['ACCEPT_REVIEW', 'APPROVE_REVIEW', 'APPROVE_REVIEWS', 'EDIT_AND_RETRY', 'REJECT_REVIEW', 'REJECT_REVIEWS', 'REPLAY_WITH_INPUT', 'REVIEW_QUEUE', 'REVIEW_QUEUE_IDS', 'REVIEW_QUEUE_STATS', 'REVIEW_ROW_UPDATED', 'TASK_REVIEW'].sort(),
    );
  });
  for (const [name, doc] of docs) {
    it(`${name} validates against the schema`, () => {
      expect(validate(s, doc).map((e) => e.message)).toEqual([]);
    });
  }
});
