// Every GraphQL document the console sends, in one place. The API is
// ent.graphql + schema.graphql at the repository root.
import { gql } from '@urql/core';

export type TaskStatus = 'PENDING' | 'EXECUTING' | 'SUCCESS' | 'FAILED' | 'RETRY_PENDING' | 'CANCELLED';
export const STATUSES: TaskStatus[] = ['PENDING', 'EXECUTING', 'RETRY_PENDING', 'SUCCESS', 'FAILED', 'CANCELLED'];
export type TaskAction = 'CANCEL' | 'RETRY';
export type ArtifactKind = 'SOURCE' | 'ERROR_REPORT' | 'EXPORT' | 'REPORT';

export interface TaskRow {
  id: string;
  code: string;
  type: string;
  title: string;
  bizID: string;
  status: TaskStatus;
  owner: string;
  priority: number;
  progressDone: number;
  progressTotal: number;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
  cancelRequested: boolean;
  availableActions: TaskAction[];
  lastError: string | null;
  result: unknown;
}

export interface TaskInstance {
  id: string;
  instanceNo: number;
  status: TaskStatus;
  attempt: number;
  workerID: string | null;
  runAt: string;
  startedAt: string | null;
  heartbeatAt: string | null;
  finishedAt: string | null;
  errorKind: string | null;
  lastError: string | null;
  stalledAt: string | null;
}

export interface TaskFull extends TaskRow {
  input: unknown;
  retryPolicy: string;
  maxAttempts: number;
  timeoutSeconds: number;
  runAt: string;
  cancelReason: string | null;
  idempotencyKey: string | null;
  version: number;
  stalledAt: string | null;
  instances: TaskInstance[];
}

export interface TaskLogLine {
  id: string;
  createdAt: string;
  level: 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';
  message: string;
  fields: Record<string, unknown> | null;
  instanceID: string | null;
}

export interface PageInfo {
  hasNextPage: boolean;
  hasPreviousPage: boolean;
  startCursor: string | null;
  endCursor: string | null;
}

export interface TaskType {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  defaultTimeoutSeconds: number;
  defaultRetryPolicy: string;
}

export interface RetryPolicy {
  name: string;
  description: string;
  maxAttempts: number;
  backoffSeconds: number[];
}

export interface StatusCount {
  status: TaskStatus;
  count: number;
}

export interface TaskStats {
  total: number;
  byStatus: StatusCount[];
  byType: { type: string; count: number; byStatus: StatusCount[] }[];
}

export interface ActionResult {
  id: string;
  ok: boolean;
  task: TaskRow | null;
  error: { code: string; message: string } | null;
}

// The fields a row, a chip or a button needs; subscriptions select the
// same so that an event refreshes every place a task is shown.
const ROW = `
  id code type title bizID status owner priority progressDone progressTotal
  createdAt updatedAt finishedAt cancelRequested availableActions lastError result
`;

// Scalars only: a subscription event's task cannot resolve edges on the
// server (its instances are read with the query; see TaskDetail).
const DETAIL = `
  ${ROW}
  input retryPolicy maxAttempts timeoutSeconds runAt cancelReason idempotencyKey version
`;

const FULL = `
  ${DETAIL}
  stalledAt
  instances { id instanceNo status attempt workerID runAt startedAt heartbeatAt finishedAt errorKind lastError stalledAt }
`;

export const TASKS = gql`
  query Tasks($first: Int, $after: Cursor, $last: Int, $before: Cursor, $orderBy: [TaskOrder!], $where: TaskWhereInput) {
    tasks(first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, where: $where) {
      totalCount
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { ${ROW} } }
    }
  }
`;

export const TASK_ROW_UPDATED = gql`
  subscription TaskRowUpdated($where: TaskWhereInput) {
    taskUpdated(where: $where) { ${ROW} }
  }
`;

export const TASK = gql`
  query Task($id: ID!) {
    task(id: $id) { ${FULL} }
  }
`;

// The executions come with every change, so that the state and the
// timeline shown never disagree.
export const TASK_UPDATED = gql`
  subscription TaskUpdated($id: ID!) {
    taskUpdated(id: $id) { ${FULL} }
  }
`;

const LOG = 'id createdAt level message fields instanceID';

export const TASK_LOGS = gql`
  query TaskLogs($id: ID!, $last: Int) {
    task(id: $id) { id logs(last: $last) { totalCount edges { node { ${LOG} } } } }
  }
`;

export const TASK_LOG_APPENDED = gql`
  subscription TaskLogAppended($taskId: ID!) {
    taskLogAppended(taskId: $taskId) { ${LOG} }
  }
`;

export const STATS = gql`
  query Stats {
    taskStats { total byStatus { status count } byType { type count byStatus { status count } } }
  }
`;

// Any committed change of any task: the dashboard refreshes its counts.
export const ANY_TASK_UPDATED = gql`
  subscription AnyTaskUpdated {
    taskUpdated { id status }
  }
`;

export const TASK_TYPES = gql`
  query TaskTypes {
    taskTypes { name description inputSchema defaultTimeoutSeconds defaultRetryPolicy }
    retryPolicies { name description maxAttempts backoffSeconds }
  }
`;

export const CREATE_TASK = gql`
  mutation CreateTask($input: CreateTaskInput!) {
    createTask(input: $input) { ${ROW} }
  }
`;

export const CANCEL_TASK = gql`
  mutation CancelTask($id: ID!, $reason: String) {
    cancelTask(id: $id, reason: $reason) { ${ROW} }
  }
`;

export const RETRY_TASK = gql`
  mutation RetryTask($id: ID!) {
    retryTask(id: $id) { ${ROW} }
  }
`;

export const CANCEL_TASKS = gql`
  mutation CancelTasks($ids: [ID!]!, $reason: String) {
    cancelTasks(ids: $ids, reason: $reason) { id ok task { ${ROW} } error { code message } }
  }
`;

export const RETRY_TASKS = gql`
  mutation RetryTasks($ids: [ID!]!) {
    retryTasks(ids: $ids) { id ok task { ${ROW} } error { code message } }
  }
`;

// dashboardQuery counts finished tasks per bucket with aliased totalCount
// queries (first: 0 fetches no rows), so that the charts are exact without
// an API of their own. $t0..$tN are the bucket edges.
export function dashboardQuery(buckets: number) {
  const vars = Array.from({ length: buckets + 1 }, (_, i) => `$t${i}: Time!`).join(', ');
  const counts = Array.from({ length: buckets }, (_, i) =>
    (['SUCCESS', 'FAILED'] as const)
      .map(
        (s) =>
          `${s === 'SUCCESS' ? 's' : 'f'}${i}: tasks(first: 0, where: {status: ${s}, finishedAtGTE: $t${i}, finishedAtLT: $t${i + 1}}) { totalCount }`,
      )
      .join('\n'),
  ).join('\n');
  return gql(`
    query Dashboard(${vars}) {
      taskStats { total byStatus { status count } byType { type count byStatus { status count } } }
      oldest: tasks(first: 1, orderBy: [{field: CREATED_AT, direction: ASC}], where: {statusIn: [PENDING, RETRY_PENDING]}) {
        totalCount edges { node { ${ROW} } }
      }
      failures: tasks(first: 8, orderBy: [{field: FINISHED_AT, direction: DESC}], where: {status: FAILED}) {
        totalCount edges { node { ${ROW} } }
      }
      ${counts}
    }
  `);
}
