import { fireEvent, render, screen, waitFor } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { RULE_FIELDS, RULE_KINDS, ruleInput } from '../api/alerts';
import { I18nProvider } from '../i18n';
import { en } from '../i18n/en';
import { zh } from '../i18n/zh';
import { href } from '../router';
import { AlertsPage } from './Alerts';

// Node's fs, without the console's types depending on Node's.
const fsName = 'node:fs';
const fs = (await import(/* @vite-ignore */ fsName)) as { readFileSync(p: string, enc: 'utf8'): string };
const cwd = (globalThis as unknown as { process: { cwd(): string } }).process.cwd();

describe('alert rule kinds', () => {
  it('are every AlertRuleKind of the schema, each labelled in both languages', () => {
    const sdl = fs.readFileSync(`${cwd}/../graph/schema/alerts.graphql`, 'utf8');
    const body = /enum AlertRuleKind \{([^}]*)\}/.exec(sdl)![1];
    const kinds = body
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => /^[A-Z_]+$/.test(l));
    expect([...RULE_KINDS].sort()).toEqual(kinds.sort());
    for (const k of RULE_KINDS) {
      expect(en[`alerts.kind.${k}` as keyof typeof en], k).toBeTruthy();
      expect(zh[`alerts.kind.${k}` as keyof typeof zh], k).toBeTruthy();
    }
  });

  it('send only the fields their kind takes', () => {
    const d = { name: 'r', taskType: 'noop', threshold: '3', windowSeconds: '600', quietSeconds: '0', channelIds: [] };
    expect(ruleInput({ ...d, kind: 'CLOCK_SKEW' })).toEqual({ name: 'r', kind: 'CLOCK_SKEW', taskType: '', threshold: 3, quietSeconds: 0, channelIds: [] });
    expect(ruleInput({ ...d, kind: 'REVIEW_OVERDUE' })).toEqual({ name: 'r', kind: 'REVIEW_OVERDUE', taskType: 'noop', threshold: 3, quietSeconds: 0, channelIds: [] });
    expect(ruleInput({ ...d, kind: 'DEADLINE_MISSED', windowSeconds: '' })).toEqual({ name: 'r', kind: 'DEADLINE_MISSED', taskType: 'noop', threshold: 3, windowSeconds: 0, quietSeconds: 0, channelIds: [] });
    expect(ruleInput({ ...d, kind: 'NODE_GONE' })).toEqual({ name: 'r', kind: 'NODE_GONE', taskType: '', quietSeconds: 0, channelIds: [] });
    expect(RULE_FIELDS.DEADLINE_AT_RISK).toEqual({ taskType: true, threshold: { label: 'alerts.taskCount', min: 1, initial: 1 } });
  });
});

describe('the rule form', () => {
  function client() {
    const respond = (op: { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> }) => {
      const name = op.query.definitions[0]?.name?.value;
      const data =
        name === 'AlertRules'
          ? { alertRules: [], alertChannels: [], taskTypes: [{ __typename: 'TaskType', name: 'noop' }] }
          : name === 'CreateAlertRule'
            ? { createAlertRule: null }
            : {};
      return fromValue({ operation: op, data, stale: false, hasNext: false });
    };
    return { executeQuery: vi.fn(respond), executeMutation: vi.fn(respond), executeSubscription: vi.fn(() => never) } as unknown as Client & { executeMutation: ReturnType<typeof vi.fn> };
  }

  const cases = [
    ['CLOCK_SKEW', { type: false, threshold: "Max skew (s; 0: the node's own threshold)", window: null }],
    ['REVIEW_OVERDUE', { type: true, threshold: 'Tasks (at least)', window: null }],
    ['DEADLINE_AT_RISK', { type: true, threshold: 'Tasks (at least)', window: null }],
    ['DEADLINE_MISSED', { type: true, threshold: 'Tasks (at least)', window: 'Window (s; 0: one hour)' }],
  ] as const;
  for (const [kind, want] of cases) {
    it(`asks for what ${kind} takes, and sends it`, async () => {
      window.history.pushState(null, '', href('/alerts?tab=rules'));
      const c = client();
      render(
        <I18nProvider lang="en">
          <Provider value={c}>
            <AlertsPage />
          </Provider>
        </I18nProvider>,
      );
      const select = await screen.findByTestId('rule-kind');
      expect([...(select as HTMLSelectElement).options].map((o) => o.value)).toContain(kind);
      fireEvent.change(select, { target: { value: kind } });
      expect(!!screen.queryByTestId('rule-type')).toBe(want.type);
      const threshold = screen.getByTestId('rule-threshold');
      expect(threshold.closest('label')!.textContent).toContain(want.threshold);
      const win = screen.queryByTestId('rule-window');
      expect(win?.closest('label')!.textContent ?? null).toBe(want.window);
      fireEvent.change(screen.getByTestId('rule-name'), { target: { value: `r-${kind}` } });
      fireEvent.change(threshold, { target: { value: '2' } });
      if (want.type) fireEvent.change(screen.getByTestId('rule-type'), { target: { value: 'noop' } });
      fireEvent.click(screen.getByTestId('rule-save'));
      await waitFor(() => expect(c.executeMutation).toHaveBeenCalled());
      const input = c.executeMutation.mock.calls[0][0].variables.input;
      expect(input).toMatchObject({ name: `r-${kind}`, kind, threshold: 2, taskType: want.type ? 'noop' : '' });
      expect('windowSeconds' in input).toBe(want.window !== null);
    });
  }
});
