// Which files a task has. The API mints a download link per (task, kind);
// the kinds worth offering follow from the task: an import keeps its source
// file, and an error report when its result names one.
import type { ArtifactKind } from '../api/queries';

export interface ImportResult {
  status: 'SUCCESS' | 'PARTIAL_SUCCESS' | 'FAILED';
  totalCount: number;
  successCount: number;
  failedCount: number;
  reportFile?: string | null;
}

export function importResult(result: unknown): ImportResult | null {
  if (!result || typeof result !== 'object') return null;
  const r = result as Record<string, unknown>;
  if (typeof r.status !== 'string' || typeof r.totalCount !== 'number') return null;
  if (!['SUCCESS', 'PARTIAL_SUCCESS', 'FAILED'].includes(r.status)) return null;
  return {
    status: r.status as ImportResult['status'],
    totalCount: r.totalCount,
    successCount: typeof r.successCount === 'number' ? r.successCount : 0,
    failedCount: typeof r.failedCount === 'number' ? r.failedCount : 0,
    reportFile: typeof r.reportFile === 'string' ? r.reportFile : null,
  };
}

export function isImportTask(task: { type: string; result: unknown }): boolean {
  return task.type === 'import' || task.type.startsWith('import') || importResult(task.result) !== null;
}

export function artifactKinds(task: { type: string; result: unknown }): ArtifactKind[] {
  const kinds: ArtifactKind[] = [];
  const ir = importResult(task.result);
  if (ir?.reportFile) kinds.push('ERROR_REPORT');
  if (isImportTask(task)) kinds.push('SOURCE');
  const r = (task.result ?? {}) as Record<string, unknown>;
  if (typeof r.exportFile === 'string') kinds.push('EXPORT');
  if (typeof r.report === 'string' || typeof r.reportKey === 'string') kinds.push('REPORT');
  return kinds;
}
