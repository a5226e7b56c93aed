// Every GraphQL document the console sends, in one place. The API is
// ent.graphql + schema.graphql at the repository root.
import { gql } from '@urql/core';

export type TaskStatus = 'WAITING_DEPENDENCY' | 'PENDING' | 'EXECUTING' | 'SUCCESS' | 'FAILED' | 'RETRY_PENDING' | 'CANCELLED' | 'REVIEW_PENDING';
export const STATUSES: TaskStatus[] = ['WAITING_DEPENDENCY', 'PENDING', 'EXECUTING', 'RETRY_PENDING', 'REVIEW_PENDING', 'SUCCESS', 'FAILED', 'CANCELLED'];
export type TaskAction = 'CANCEL' | 'RETRY' | 'RETRY_WORKFLOW' | 'REPLAY_WITH_INPUT' | 'APPROVE_REVIEW' | 'EDIT_AND_RETRY' | 'ACCEPT_REVIEW' | 'REJECT_REVIEW';
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
  // Read by the task query only (not by its subscription).
  stepKey?: string | null;
  workflow?: { id: string; code: string; title: string } | null;
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
  /** The bounds of an estimate's 95% interval; count when exact. */
  low: number;
  high: number;
}

/** taskStats: counted, or (exact false) estimated from a sample of the table. */
export interface TaskStats {
  total: number;
  totalLow: number;
  totalHigh: number;
  exact: boolean;
  sampled: number;
  byStatus: StatusCount[];
  byType: { type: string; count: number; low: number; high: number; byStatus: StatusCount[] }[];
}

export interface ActionResult {
  id: string;
  ok: boolean;
  task: TaskRow | null;
  error: { code: string; message: string } | null;
}

// The fields a row, a chip or a button needs; subscriptions select the
// same so that an event refreshes every place a task is shown.
export const ROW = `
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
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { ${ROW} } }
    }
    taskCount(where: $where) { count exact low high sampled }
  }
`;

/** taskCount: exact, or estimated from a sample of the table with its 95% interval. */
export interface TaskCount {
  count: number;
  exact: boolean;
  low: number;
  high: number;
  sampled: number;
}

export const TASK_ROW_UPDATED = gql`
  subscription TaskRowUpdated($where: TaskWhereInput) {
    taskUpdated(where: $where) { ${ROW} }
  }
`;

export const TASK = gql`
  query Task($id: ID!) {
    task(id: $id) { ${FULL} stepKey workflow { id code title } }
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

const STATS_FIELDS = `total totalLow totalHigh exact sampled byStatus { status count low high } byType { type count low high byStatus { status count low high } }`;

export const STATS = gql`
  query Stats {
    taskStats { ${STATS_FIELDS} }
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
      taskStats { ${STATS_FIELDS} }
      oldest: tasks(first: 1, orderBy: [{field: CREATED_AT, direction: ASC}], where: {statusIn: [PENDING, RETRY_PENDING]}) {
        edges { node { ${ROW} } }
      }
      failures: tasks(first: 8, orderBy: [{field: FINISHED_AT, direction: DESC}], where: {status: FAILED}) {
        totalCount edges { node { ${ROW} } }
      }
      ${counts}
    }
  `);
}

// --- Schedules and flow control (graph/schema/schedules.graphql, flow.graphql) ---

export type MisfirePolicy = 'SKIP' | 'RUN_ONCE';
export type OverlapPolicy = 'SKIP' | 'QUEUE' | 'CANCEL_PREVIOUS' | 'ALLOW';
export const MISFIRE_POLICIES: MisfirePolicy[] = ['SKIP', 'RUN_ONCE'];
export const OVERLAP_POLICIES: OverlapPolicy[] = ['SKIP', 'QUEUE', 'CANCEL_PREVIOUS', 'ALLOW'];

export interface ScheduleRow {
  id: string;
  name: string;
  owner: string;
  cron: string;
  intervalSeconds: number | null;
  timezone: string;
  effectiveTimezone: string;
  taskType: string;
  taskTitle: string;
  paused: boolean;
  misfirePolicy: MisfirePolicy;
  overlapPolicy: OverlapPolicy;
  nextFireAt: string | null;
  lastFiredAt: string | null;
  queuedCount: number;
  startAt: string | null;
  endAt: string | null;
  upcoming: string[];
  // The workflow a workflow schedule creates at each slot (createWorkflow's
  // definition, its steps' inputs masked); null for a task schedule.
  workflow: ScheduleWorkflow | null;
}

// A workflow schedule's definition, as the server stores it.
export interface ScheduleWorkflow {
  title?: string | null;
  onParentFailure?: ParentFailurePolicy | null;
  steps?: ScheduleWorkflowStep[] | null;
}

export interface ScheduleWorkflowStep {
  key: string;
  type: string;
  title?: string | null;
  input?: unknown;
  dependsOn?: string[] | null;
  onParentFailure?: ParentFailurePolicy | null;
}

export interface ScheduleEvent {
  id: string;
  kind: string;
  slot: string | null;
  taskID: string | null;
  missed: number;
  message: string;
  node: string;
  createdAt: string;
}

const SCHEDULE_ROW = `
  id name owner cron intervalSeconds timezone effectiveTimezone taskType taskTitle paused
  misfirePolicy overlapPolicy nextFireAt lastFiredAt queuedCount startAt endAt upcoming(count: 3) workflow
`;

const WORKFLOW_ROW = 'id code title status stepsDone stepCount onParentFailure createdAt owner availableActions';

export const SCHEDULES = gql`
  query Schedules {
    schedules(first: 100) { totalCount edges { node { ${SCHEDULE_ROW} } } }
  }
`;

export const SCHEDULE = gql`
  query Schedule($id: ID!) {
    schedule(id: $id) {
      ${SCHEDULE_ROW}
      taskInput taskPriority taskTimeoutSeconds taskRetryPolicy taskMaxAttempts
      events(last: 50) { totalCount edges { node { id kind slot taskID missed message node createdAt } } }
      tasks(first: 20) { totalCount edges { node { ${ROW} scheduleSlot } } }
      workflows(first: 20) { totalCount edges { node { ${WORKFLOW_ROW} scheduleSlot } } }
    }
  }
`;

export const SCHEDULE_PREVIEW = gql`
  query SchedulePreview($input: SchedulePreviewInput!, $count: Int) {
    schedulePreview(input: $input, count: $count)
  }
`;

export const CREATE_SCHEDULE = gql`
  mutation CreateSchedule($input: CreateScheduleInput!) {
    createSchedule(input: $input) { ${SCHEDULE_ROW} }
  }
`;

export const PAUSE_SCHEDULE = gql`
  mutation PauseSchedule($id: ID!) { pauseSchedule(id: $id) { ${SCHEDULE_ROW} } }
`;

export const RESUME_SCHEDULE = gql`
  mutation ResumeSchedule($id: ID!) { resumeSchedule(id: $id) { ${SCHEDULE_ROW} } }
`;

export const DELETE_SCHEDULE = gql`
  mutation DeleteSchedule($id: ID!) { deleteSchedule(id: $id) }
`;

export const RUN_SCHEDULE_NOW = gql`
  mutation RunScheduleNow($id: ID!) { runScheduleNow(id: $id) { ${ROW} scheduleSlot } }
`;

// A workflow schedule runs now through its own mutation (runScheduleNow is
// a VALIDATION error for it).
export const RUN_SCHEDULE_WORKFLOW_NOW = gql`
  mutation RunScheduleWorkflowNow($id: ID!) { runScheduleWorkflowNow(id: $id) { ${WORKFLOW_ROW} scheduleSlot } }
`;

// The tasks of one schedule, live: a new one appears when it is fired.
export const SCHEDULE_TASK_UPDATED = gql`
  subscription ScheduleTaskUpdated($where: TaskWhereInput) {
    taskUpdated(where: $where) { ${ROW} scheduleSlot }
  }
`;

export interface TypeControl {
  type: string;
  maxRunning: number | null;
  rateLimit: number | null;
  ratePeriodSeconds: number;
  paused: boolean;
  pausedUntil: string | null;
  running: number;
  waiting: number;
  startedInWindow: number;
  nextStartAt: string | null;
  updatedBy: string | null;
  updatedAt: string | null;
}

const CONTROL = `type maxRunning rateLimit ratePeriodSeconds paused pausedUntil running waiting startedInWindow nextStartAt updatedBy updatedAt`;

export const TYPE_CONTROLS = gql`
  query TypeControls { typeControls { ${CONTROL} } }
`;

export const SET_TYPE_CONTROL = gql`
  mutation SetTypeControl($type: String!, $input: TypeControlInput!) { setTypeControl(type: $type, input: $input) { ${CONTROL} } }
`;

export const PAUSE_TYPE = gql`
  mutation PauseType($type: String!, $until: Time) { pauseType(type: $type, until: $until) { ${CONTROL} } }
`;

export const RESUME_TYPE = gql`
  mutation ResumeType($type: String!) { resumeType(type: $type) { ${CONTROL} } }
`;

export interface WaitReason {
  kind: 'NOT_DUE' | 'PAUSED' | 'AT_CAP' | 'RATE_LIMITED';
  message: string;
  until: string | null;
  limit: number | null;
  current: number | null;
}

// Why a waiting task waits: read with the task, and again when it changes.
export const TASK_WAITING = gql`
  query TaskWaiting($id: ID!) { task(id: $id) { id status waitingReason { kind message until limit current } } }
`;

// --- Workflows ---

export interface WorkflowRow {
  id: string;
  code: string;
  title: string;
  status: TaskStatus;
  stepsDone: number;
  stepCount: number;
  onParentFailure: ParentFailurePolicy;
  createdAt: string;
  owner: string;
  availableActions: TaskAction[];
}

export type ParentFailurePolicy = 'CANCEL_DEPENDENTS' | 'WAIT' | 'RUN_ANYWAY';
export const PARENT_FAILURE_POLICIES: ParentFailurePolicy[] = ['CANCEL_DEPENDENTS', 'WAIT', 'RUN_ANYWAY'];

// What the picture needs of a step; its subscription selects the same.
export interface StepNode {
  id: string;
  code: string;
  stepKey: string | null;
  title: string;
  type: string;
  status: TaskStatus;
  version: number;
  availableActions: TaskAction[];
  lastError: string | null;
}

const STEP = 'id code stepKey title type status version availableActions lastError';

export const WORKFLOWS = gql`
  query Workflows($first: Int, $after: Cursor, $last: Int, $before: Cursor, $where: WorkflowWhereInput) {
    workflows(first: $first, after: $after, last: $last, before: $before, where: $where, orderBy: {field: CREATED_AT, direction: DESC}) {
      totalCount
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { ${WORKFLOW_ROW} } }
    }
  }
`;

export const WORKFLOW = gql`
  query Workflow($id: ID!) {
    workflow(id: $id) { ${WORKFLOW_ROW} }
  }
`;

export const WORKFLOW_STEPS = gql`
  query WorkflowSteps($id: ID!) {
    workflow(id: $id) { id steps { ${STEP} } }
  }
`;

// The edges of the steps drawn: each one's parents (read once; a
// workflow's edges do not change).
export const STEP_PARENTS = gql`
  query StepParents($ids: [ID!]!) {
    nodes(ids: $ids) { ... on Task { id parents { id } } }
  }
`;

export const STEPS_UPDATED = gql`
  subscription StepsUpdated($where: TaskWhereInput) {
    taskUpdated(where: $where) { ${STEP} }
  }
`;

export const CANCEL_WORKFLOW = gql`
  mutation CancelWorkflow($id: ID!, $reason: String) {
    cancelWorkflow(id: $id, reason: $reason) { ${WORKFLOW_ROW} }
  }
`;

export const RETRY_STEP = gql`
  mutation RetryStep($id: ID!) {
    retryTask(id: $id) { ${STEP} }
  }
`;

export const RETRY_WORKFLOW = gql`
  mutation RetryWorkflow($id: ID!, $reason: String) {
    retryWorkflow(id: $id, reason: $reason) { ${WORKFLOW_ROW} }
  }
`;
