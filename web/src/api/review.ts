// The review API's documents and types (graph/schema/review.graphql): the
// queue of tasks in REVIEW_PENDING, a task's reviews and input versions
// (with their field-by-field diff), and the decisions.
import { gql } from '@urql/core';
import type { FieldChange } from '../lib/review';
import { ROW, type PageInfo, type TaskRow } from './queries';

export type ReviewTrigger = 'NON_RETRYABLE' | 'NEEDS_REVIEW' | 'PARTIAL_SUCCESS';
export type ReviewDecision = 'APPROVED' | 'EDITED' | 'ACCEPTED' | 'REJECTED' | 'EXPIRED' | 'CANCELLED';

export interface Review {
  id: string;
  instanceNo: number;
  trigger: ReviewTrigger;
  reason: string;
  evidence: unknown;
  since: string;
  deadline: string | null;
  onDeadline: 'REJECT' | 'ALERT' | null;
  overdue: boolean;
  fourEyes: boolean;
  submittedBy: string;
  decision: ReviewDecision | null;
  decidedBy: string | null;
  decidedAt: string | null;
  decisionReason: string | null;
  inputVersion: number | null;
  // The evidence's files (an import's error reports), downloaded by kind.
  files: { id: string; kind: string; filename: string; size: number }[];
}

export interface InputVersion {
  version: number;
  input: unknown;
  author: string;
  reason: string;
  createdAt: string;
  fromInstanceNo: number;
  diff: FieldChange[];
}

export interface QueueRow extends TaskRow {
  tenant: string;
  review: Review | null;
}

export interface ReviewTask extends QueueRow {
  input: unknown;
  version: number;
  reviews: Review[];
  inputVersions: InputVersion[];
}

export interface QueueStats {
  size: number;
  oldestSince: string | null;
  overdue: number;
  oldest: (TaskRow & { tenant: string }) | null;
}

const REVIEW = `
  id instanceNo trigger reason evidence since deadline onDeadline overdue fourEyes submittedBy
  decision decidedBy decidedAt decisionReason inputVersion
  files { id kind filename size }
`;

const QUEUE_ROW = `${ROW} tenant review { ${REVIEW} }`;

export const REVIEW_QUEUE = gql`
  query ReviewQueue($where: ReviewQueueWhere, $first: Int, $after: Cursor, $last: Int, $before: Cursor) {
    reviewQueue(where: $where, first: $first, after: $after, last: $last, before: $before) {
      totalCount
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { ${QUEUE_ROW} } }
    }
  }
`;

// Only the ids, a page at a time: what a bulk decision over the filter acts on.
export const REVIEW_QUEUE_IDS = gql`
  query ReviewQueueIds($where: ReviewQueueWhere, $first: Int, $after: Cursor) {
    reviewQueue(where: $where, first: $first, after: $after) {
      totalCount
      pageInfo { hasNextPage endCursor }
      edges { node { id availableActions } }
    }
  }
`;

export const REVIEW_QUEUE_STATS = gql`
  query ReviewQueueStats($where: ReviewQueueWhere) {
    reviewQueueStats(where: $where) { size oldestSince overdue oldest { ${ROW} tenant } }
  }
`;

// The queue's items as they change, and tasks entering review.
export const REVIEW_ROW_UPDATED = gql`
  subscription ReviewRowUpdated($where: TaskWhereInput) {
    taskUpdated(where: $where) { ${ROW} tenant }
  }
`;

export const TASK_REVIEW = gql`
  query TaskReview($id: ID!) {
    task(id: $id) {
      ${QUEUE_ROW} input version
      reviews { ${REVIEW} }
      inputVersions { version input author reason createdAt fromInstanceNo diff { path kind before after masked } }
    }
  }
`;

export const APPROVE_REVIEW = gql`
  mutation ApproveReview($id: ID!, $reason: String) { approveReview(id: $id, reason: $reason) { ${ROW} } }
`;

export const EDIT_AND_RETRY = gql`
  mutation EditAndRetry($id: ID!, $input: JSON!, $reason: String!) { editAndRetry(id: $id, input: $input, reason: $reason) { ${ROW} } }
`;

export const ACCEPT_REVIEW = gql`
  mutation AcceptReview($id: ID!, $reason: String) { acceptReview(id: $id, reason: $reason) { ${ROW} } }
`;

export const REJECT_REVIEW = gql`
  mutation RejectReview($id: ID!, $reason: String!) { rejectReview(id: $id, reason: $reason) { ${ROW} } }
`;

export const REPLAY_WITH_INPUT = gql`
  mutation ReplayWithInput($id: ID!, $input: JSON!, $reason: String!) { replayWithInput(id: $id, input: $input, reason: $reason) { ${ROW} } }
`;

export const APPROVE_REVIEWS = gql`
  mutation ApproveReviews($ids: [ID!]!, $reason: String) { approveReviews(ids: $ids, reason: $reason) { id ok task { ${ROW} } error { code message } } }
`;

export const REJECT_REVIEWS = gql`
  mutation RejectReviews($ids: [ID!]!, $reason: String!) { rejectReviews(ids: $ids, reason: $reason) { id ok task { ${ROW} } error { code message } } }
`;

export interface QueueData {
  reviewQueue: { totalCount: number; pageInfo: PageInfo; edges: { cursor: string; node: QueueRow }[] };
}
