// The alert API (graph/schema/alerts.graphql): rules, channels, incidents.
import { gql } from '@urql/core';

export type RuleKind =
  | 'TASK_FAILED'
  | 'TIMEOUT'
  | 'STALLED'
  | 'FAILURE_RATE'
  | 'BACKLOG'
  | 'NO_LEADER'
  | 'NODE_GONE'
  | 'CLOCK_SKEW'
  | 'REVIEW_OVERDUE'
  | 'DEADLINE_AT_RISK'
  | 'DEADLINE_MISSED';
export const RULE_KINDS: RuleKind[] = [
  'TASK_FAILED',
  'TIMEOUT',
  'STALLED',
  'FAILURE_RATE',
  'BACKLOG',
  'NO_LEADER',
  'NODE_GONE',
  'CLOCK_SKEW',
  'REVIEW_OVERDUE',
  'DEADLINE_AT_RISK',
  'DEADLINE_MISSED',
];

/** A number a rule of a kind takes: its label (an i18n key), its least value and its default. */
export interface RuleNumber {
  label: 'alerts.threshold' | 'alerts.window' | 'alerts.age' | 'alerts.skewSeconds' | 'alerts.taskCount' | 'alerts.missedWindow';
  min: number;
  initial: number;
}

/** What the form asks for a rule of a kind (docs/alerts.md): a task type, a threshold, a window. */
export interface RuleFields {
  /** The rule watches one type (or any): the cluster-wide kinds watch none. */
  taskType: boolean;
  threshold?: RuleNumber;
  windowSeconds?: RuleNumber;
}

export const RULE_FIELDS: Record<RuleKind, RuleFields> = {
  TASK_FAILED: { taskType: true },
  TIMEOUT: { taskType: true },
  STALLED: { taskType: true },
  FAILURE_RATE: { taskType: true, threshold: { label: 'alerts.threshold', min: 1, initial: 5 }, windowSeconds: { label: 'alerts.window', min: 1, initial: 60 } },
  BACKLOG: { taskType: true, windowSeconds: { label: 'alerts.age', min: 1, initial: 300 } },
  NO_LEADER: { taskType: false, windowSeconds: { label: 'alerts.age', min: 1, initial: 30 } },
  NODE_GONE: { taskType: false },
  // 0: each node's own --clock-skew-threshold.
  CLOCK_SKEW: { taskType: false, threshold: { label: 'alerts.skewSeconds', min: 0, initial: 0 } },
  REVIEW_OVERDUE: { taskType: true, threshold: { label: 'alerts.taskCount', min: 1, initial: 1 } },
  DEADLINE_AT_RISK: { taskType: true, threshold: { label: 'alerts.taskCount', min: 1, initial: 1 } },
  // 0: the last hour.
  DEADLINE_MISSED: { taskType: true, threshold: { label: 'alerts.taskCount', min: 1, initial: 1 }, windowSeconds: { label: 'alerts.missedWindow', min: 0, initial: 0 } },
};

/** The form's values of a new rule. */
export interface RuleDraft {
  name: string;
  kind: RuleKind;
  taskType: string;
  threshold: string;
  windowSeconds: string;
  quietSeconds: string;
  channelIds: string[];
}

/** ruleInput is createAlertRule's input: only the fields the kind takes. */
export function ruleInput(d: RuleDraft): Record<string, unknown> {
  const f = RULE_FIELDS[d.kind];
  const input: Record<string, unknown> = { name: d.name, kind: d.kind, taskType: f.taskType ? d.taskType : '', quietSeconds: Number(d.quietSeconds) || 0, channelIds: d.channelIds };
  if (f.threshold) input.threshold = d.threshold.trim() === '' ? f.threshold.initial : Number(d.threshold);
  if (f.windowSeconds) input.windowSeconds = d.windowSeconds.trim() === '' ? f.windowSeconds.initial : Number(d.windowSeconds);
  return input;
}

export type ChannelKind = 'WEBHOOK' | 'DINGTALK' | 'FEISHU' | 'WECOM' | 'SLACK';
export const CHANNEL_KINDS: ChannelKind[] = ['WEBHOOK', 'DINGTALK', 'FEISHU', 'WECOM', 'SLACK'];

export interface AlertChannel {
  id: string;
  name: string;
  kind: ChannelKind;
  urlDisplay: string;
  hasSecret: boolean;
}

export interface AlertRule {
  id: string;
  name: string;
  kind: RuleKind;
  enabled: boolean;
  taskType: string;
  owner: string;
  errorKind: string | null;
  threshold: number;
  windowSeconds: number;
  quietSeconds: number;
  silencedUntil: string | null;
  lastNotifiedAt: string | null;
  channels: AlertChannel[];
}

export interface Delivery {
  id: string;
  code: string;
  status: string;
  lastError: string | null;
  createdAt: string;
}

export interface AlertIncident {
  id: string;
  ruleId: string;
  ruleName: string;
  kind: RuleKind;
  subject: string;
  status: 'OPEN' | 'RESOLVED';
  occurrences: number;
  summary: string;
  openedAt: string;
  lastSeenAt: string;
  resolvedAt: string | null;
  resolution: string | null;
  silencedUntil: string | null;
  notified: boolean;
  lastTask: { id: string; code: string } | null;
}

const CHANNEL = 'id name kind urlDisplay hasSecret';
const RULE = `id name kind enabled taskType owner errorKind threshold windowSeconds quietSeconds silencedUntil lastNotifiedAt channels { ${CHANNEL} }`;
const INCIDENT = 'id ruleId ruleName kind subject status occurrences summary openedAt lastSeenAt resolvedAt resolution silencedUntil notified lastTask { id code }';

export const OPEN_INCIDENTS = gql`
  query OpenIncidents {
    alertIncidents(status: OPEN, first: 50) { ${INCIDENT} }
  }
`;

export const INCIDENTS = gql`
  query Incidents($status: AlertIncidentStatus) {
    alertIncidents(status: $status, first: 100) { ${INCIDENT} deliveries { id code status lastError createdAt } }
  }
`;

export const INCIDENT_CHANGED = gql`
  subscription IncidentChanged {
    alertIncidentChanged { ${INCIDENT} }
  }
`;

export const RULES = gql`
  query AlertRules {
    alertRules { ${RULE} }
    alertChannels { ${CHANNEL} }
    taskTypes { name }
  }
`;

export const CREATE_RULE = gql`
  mutation CreateAlertRule($input: AlertRuleInput!) {
    createAlertRule(input: $input) { ${RULE} }
  }
`;

export const DELETE_RULE = gql`
  mutation DeleteAlertRule($id: ID!) {
    deleteAlertRule(id: $id)
  }
`;

export const SILENCE_RULE = gql`
  mutation SilenceAlertRule($id: ID!, $until: Time) {
    silenceAlertRule(id: $id, until: $until) { ${RULE} }
  }
`;

export const CREATE_CHANNEL = gql`
  mutation CreateAlertChannel($input: AlertChannelInput!) {
    createAlertChannel(input: $input) { ${CHANNEL} }
  }
`;

export const DELETE_CHANNEL = gql`
  mutation DeleteAlertChannel($id: ID!) {
    deleteAlertChannel(id: $id)
  }
`;

export const TEST_CHANNEL = gql`
  mutation TestAlertChannel($id: ID!) {
    testAlertChannel(id: $id) { id code status }
  }
`;

export const SILENCE_INCIDENT = gql`
  mutation SilenceAlertIncident($id: ID!, $until: Time) {
    silenceAlertIncident(id: $id, until: $until) { ${INCIDENT} }
  }
`;

export const RESOLVE_INCIDENT = gql`
  mutation ResolveAlertIncident($id: ID!) {
    resolveAlertIncident(id: $id) { ${INCIDENT} }
  }
`;
