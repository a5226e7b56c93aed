// The alert API (graph/schema/alerts.graphql): rules, channels, incidents.
import { gql } from '@urql/core';

export type RuleKind = 'TASK_FAILED' | 'TIMEOUT' | 'STALLED' | 'FAILURE_RATE' | 'BACKLOG' | 'NO_LEADER' | 'NODE_GONE';
export const RULE_KINDS: RuleKind[] = ['TASK_FAILED', 'TIMEOUT', 'STALLED', 'FAILURE_RATE', 'BACKLOG', 'NO_LEADER', 'NODE_GONE'];
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
