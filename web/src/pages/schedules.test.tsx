// Schedules of workflows: the form's workflow mode (the steps edited as
// JSON, parsed here, sent as workflow; a syntax error sends nothing; the
// server's VALIDATION problems at the field) and the detail page of a
// workflow schedule (its steps, the workflows it created, Run now through
// runScheduleWorkflowNow).
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { I18nProvider } from '../i18n';
import { ScheduleDetail } from './ScheduleDetail';
import { exampleSteps, Schedules } from './Schedules';

type Op = { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> };
type Responder = (name: string, op: Op) => unknown;

function client(respond: Responder) {
  const handle = (op: Op) => {
    const name = op.query.definitions[0]?.name?.value ?? '';
    return fromValue({ operation: op, stale: false, hasNext: false, ...((respond(name, op) ?? {}) as object) });
  };
  return {
    executeQuery: vi.fn(handle),
    executeMutation: vi.fn(handle),
    executeSubscription: vi.fn(() => never),
    subscription: vi.fn(() => ({ subscribe: () => ({ unsubscribe() {} }) })),
  } as unknown as Client & { executeMutation: ReturnType<typeof vi.fn> };
}

const wrap = (c: Client, ui: React.ReactNode) =>
  render(
    <I18nProvider lang="en">
      <Provider value={c}>{ui}</Provider>
    </I18nProvider>,
  );

const row = {
  __typename: 'Schedule',
  id: '7',
  name: 'nightly',
  owner: 'root',
  cron: '0 2 * * *',
  intervalSeconds: null,
  timezone: '',
  effectiveTimezone: 'UTC',
  taskType: '',
  taskTitle: '',
  paused: false,
  misfirePolicy: 'SKIP',
  overlapPolicy: 'SKIP',
  nextFireAt: '2026-12-05T02:00:00Z',
  lastFiredAt: null,
  queuedCount: 0,
  startAt: null,
  endAt: null,
  upcoming: ['2026-12-05T02:00:00Z'],
  workflow: {
    title: 'nightly export',
    onParentFailure: 'WAIT',
    steps: [
      { key: 'export', type: 'noop', input: {} },
      { key: 'report', type: 'noop', dependsOn: ['export'] },
    ],
  },
};

function listResponder(mutation: (op: Op) => unknown): Responder {
  return (name, op) => {
    switch (name) {
      case 'Schedules':
        return { data: { schedules: { __typename: 'ScheduleConnection', totalCount: 1, edges: [{ __typename: 'ScheduleEdge', node: row }] } } };
      case 'TaskTypes':
        return {
          data: {
            taskTypes: [{ __typename: 'TaskType', name: 'noop', description: '', inputSchema: null, defaultTimeoutSeconds: 60, defaultRetryPolicy: 'default' }],
            retryPolicies: [],
          },
        };
      case 'SchedulePreview':
        return { data: { schedulePreview: [] } };
      case 'CreateSchedule':
        return mutation(op);
    }
    return {};
  };
}

async function openWorkflowForm() {
  fireEvent.click(screen.getByTestId('schedule-new'));
  fireEvent.change(screen.getByTestId('sched-name'), { target: { value: 'wf every minute' } });
  fireEvent.change(screen.getByTestId('sched-creates'), { target: { value: 'workflow' } });
  await screen.findByTestId('sched-wfSteps');
  // Task-only fields are not shown for a workflow.
  expect(screen.queryByTestId('sched-type')).toBeNull();
  expect(screen.queryByTestId('sched-input')).toBeNull();
}

describe('Schedules page, workflow mode', () => {
  it('lists a workflow schedule by its title and size', async () => {
    wrap(client(listResponder(() => ({}))), <Schedules />);
    expect((await screen.findByTestId('schedule-what')).textContent).toBe('nightly export · workflow (2 steps)');
  });

  it('sends workflow with the parsed steps, the title and policy, and no task', async () => {
    const c = client(listResponder(() => ({ data: { createSchedule: { ...row, id: '8' } } })));
    wrap(c, <Schedules />);
    await openWorkflowForm();
    const editor = screen.getByTestId('sched-wfSteps') as HTMLTextAreaElement;
    // Prefilled with a valid example: two steps of a registered type, the
    // second waiting for the first.
    expect(JSON.parse(editor.value)).toEqual(JSON.parse(exampleSteps('noop')));
    const steps = [
      { key: 'a', type: 'noop', input: { note: 'x' } },
      { key: 'b', type: 'noop', dependsOn: ['a'] },
    ];
    fireEvent.change(editor, { target: { value: JSON.stringify(steps) } });
    fireEvent.change(screen.getByTestId('sched-wfTitle'), { target: { value: 'exports' } });
    fireEvent.change(screen.getByTestId('sched-wfPolicy'), { target: { value: 'RUN_ANYWAY' } });
    fireEvent.click(screen.getByTestId('schedule-submit'));
    await waitFor(() => expect(c.executeMutation).toHaveBeenCalledTimes(1));
    const input = (c.executeMutation.mock.calls[0][0] as Op).variables.input as Record<string, unknown>;
    expect(input.workflow).toEqual({ title: 'exports', onParentFailure: 'RUN_ANYWAY', steps });
    expect('task' in input).toBe(false);
    expect(input.name).toBe('wf every minute');
    await waitFor(() => expect(window.location.pathname).toMatch(/\/schedules\/8$/));
  });

  it('sends nothing on a JSON syntax error, and says so at the field', async () => {
    const c = client(listResponder(() => ({})));
    wrap(c, <Schedules />);
    await openWorkflowForm();
    fireEvent.change(screen.getByTestId('sched-wfSteps'), { target: { value: '[{"key": "a", "type": "noop",}]' } });
    fireEvent.click(screen.getByTestId('schedule-submit'));
    expect((await screen.findByTestId('sched-wfSteps-error')).textContent).toMatch(/^Not valid JSON: /);
    fireEvent.change(screen.getByTestId('sched-wfSteps'), { target: { value: '{"key": "a"}' } });
    fireEvent.click(screen.getByTestId('schedule-submit'));
    await waitFor(() => expect(screen.getByTestId('sched-wfSteps-error').textContent).toBe('The steps must be a JSON array of objects.'));
    expect(c.executeMutation).not.toHaveBeenCalled();
  });

  it("shows the server's VALIDATION problems of the steps at the field", async () => {
    const c = client(
      listResponder(() => ({
        error: {
          name: 'CombinedError',
          message: '[GraphQL] invalid',
          graphQLErrors: [
            {
              message: 'invalid',
              extensions: {
                code: 'VALIDATION',
                problems: [
                  { field: 'workflow.steps[1].dependsOn', message: 'no step has the key "nope"' },
                  { field: 'workflow.title', message: 'too long' },
                ],
              },
            },
          ],
        },
      })),
    );
    wrap(c, <Schedules />);
    await openWorkflowForm();
    fireEvent.change(screen.getByTestId('sched-wfSteps'), {
      target: { value: JSON.stringify([{ key: 'a', type: 'noop' }, { key: 'b', type: 'noop', dependsOn: ['nope'] }]) },
    });
    fireEvent.click(screen.getByTestId('schedule-submit'));
    expect((await screen.findByTestId('sched-wfSteps-problems')).textContent).toBe('steps[1].dependsOn: no step has the key "nope"');
    expect(screen.getByTestId('sched-wfTitle').parentElement!.textContent).toContain('too long');
    expect(c.executeMutation).toHaveBeenCalledTimes(1);
  });
});

describe('ScheduleDetail of a workflow schedule', () => {
  const wf = (id: string, code: string, status: string, done: number) => ({
    __typename: 'Workflow',
    id,
    code,
    title: 'nightly export',
    status,
    stepsDone: done,
    stepCount: 2,
    onParentFailure: 'WAIT',
    createdAt: '2026-12-04T02:00:00Z',
    owner: 'root',
    availableActions: [],
    scheduleSlot: '2026-12-04T02:00:00Z',
  });
  function detailClient(runs: { n: number }) {
    return client((name) => {
      if (name === 'Schedule') {
        const workflows = [wf('41', 'WF-41', 'SUCCESS', 2)];
        if (runs.n > 0) workflows.unshift(wf('42', 'WF-42', 'PENDING', 0));
        return {
          data: {
            schedule: {
              ...row,
              taskInput: {},
              taskPriority: null,
              taskTimeoutSeconds: null,
              taskRetryPolicy: null,
              taskMaxAttempts: null,
              events: { __typename: 'ScheduleEventConnection', totalCount: 0, edges: [] },
              tasks: { __typename: 'TaskConnection', totalCount: 0, edges: [] },
              workflows: { __typename: 'WorkflowConnection', totalCount: workflows.length, edges: workflows.map((node) => ({ __typename: 'WorkflowEdge', node })) },
            },
          },
        };
      }
      if (name === 'RunScheduleWorkflowNow') {
        runs.n++;
        return { data: { runScheduleWorkflowNow: wf('42', 'WF-42', 'PENDING', 0) } };
      }
      if (name === 'RunScheduleNow') return { error: { name: 'CombinedError', message: 'wrong mutation', graphQLErrors: [{ message: 'use runScheduleWorkflowNow', extensions: { code: 'VALIDATION' } }] } };
      return {};
    });
  }

  it('shows the steps and the workflows it created, and Run now runs the workflow', async () => {
    const runs = { n: 0 };
    const c = detailClient(runs);
    wrap(c, <ScheduleDetail id="7" />);
    const steps = await screen.findAllByTestId('schedule-wf-step');
    expect(steps.map((r) => [...r.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent))).toEqual([
      ['export', 'noop', '—'],
      ['report', 'noop', 'export'],
    ]);
    expect(screen.getByTestId('schedule-workflow').textContent).toContain('nightly export');
    expect(screen.queryByTestId('schedule-tasks')).toBeNull();

    const created = screen.getAllByTestId('schedule-workflow-row');
    expect(created).toHaveLength(1);
    const link = within(created[0]).getByText('WF-41');
    expect(link.getAttribute('href')).toMatch(/\/workflows\/41$/);
    expect(within(created[0]).getByTestId('status-chip').getAttribute('data-status')).toBe('SUCCESS');

    fireEvent.click(screen.getByTestId('schedule-run-now'));
    await waitFor(() => expect(c.executeMutation).toHaveBeenCalledTimes(1));
    const op = c.executeMutation.mock.calls[0][0] as Op;
    expect(op.query.definitions[0]?.name?.value).toBe('RunScheduleWorkflowNow');
    expect(op.variables).toEqual({ id: '7' });
    const notice = await screen.findByTestId('schedule-run-created');
    expect(notice.textContent).toBe('Created workflow WF-42');
    expect(notice.querySelector('a')!.getAttribute('href')).toMatch(/\/workflows\/42$/);
    await waitFor(() => expect(screen.getAllByTestId('schedule-workflow-row')).toHaveLength(2));
    expect(screen.queryByRole('alert')).toBeNull();
  });
});
