import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import type { ReactNode } from 'react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { markConnected, markLost } from '../api/session';
import { I18nProvider, type Lang } from '../i18n';
import { Launch } from '../pages/Launch';
import { ActionButtons } from './ActionButtons';
import { ConnectionBanner } from './ConnectionBanner';
import { ProgressBar } from './ProgressBar';
import { StatusChip } from './StatusChip';
import { CountText } from './CountText';
import { act } from 'react';
import { href } from '../router';

type Op = { query: unknown; variables: Record<string, unknown>; kind: string };

function mockClient(answer: (op: Op) => unknown = () => ({})) {
  type Req = { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> };
  const respond = (kind: string) => (op: Req) => {
    const data = answer({ query: op.query.definitions[0]?.name?.value, variables: op.variables, kind });
    return fromValue({ operation: op, data, stale: false, hasNext: false });
  };
  return {
    executeQuery: vi.fn(respond('query')),
    executeMutation: vi.fn(respond('mutation')),
    executeSubscription: vi.fn(() => never),
  } as unknown as Client & { executeMutation: ReturnType<typeof vi.fn> };
}

function wrap(ui: ReactNode, client = mockClient(), lang: Lang = 'en') {
  return render(
    <I18nProvider lang={lang}>
      <Provider value={client}>{ui}</Provider>
    </I18nProvider>,
  );
}

describe('StatusChip', () => {
  it('shows the translated state and keeps the code for machines', () => {
    wrap(<StatusChip status="RETRY_PENDING" />, mockClient(), 'zh');
    const chip = screen.getByTestId('status-chip');
    expect(chip.textContent).toBe('等待重试');
    expect(chip.dataset.status).toBe('RETRY_PENDING');
  });
});

describe('ActionButtons', () => {
  const task = (actions: ('CANCEL' | 'RETRY')[]) => ({ id: '7', code: 'NOOP-1', availableActions: actions });

  it('shows exactly the actions the state machine allows', () => {
    const { rerender } = wrap(<ActionButtons task={task([])} />);
    expect(screen.queryByRole('button')).toBeNull();
    rerender(
      <I18nProvider lang="en">
        <Provider value={mockClient()}>
          <ActionButtons task={task(['RETRY'])} />
        </Provider>
      </I18nProvider>,
    );
    expect(screen.getByTestId('action-retry')).toBeTruthy();
    expect(screen.queryByTestId('action-cancel')).toBeNull();
  });

  it('asks before cancelling and sends the reason', async () => {
    const client = mockClient((op) => (op.kind === 'mutation' ? { cancelTask: { id: '7', __typename: 'Task' } } : {}));
    wrap(<ActionButtons task={task(['CANCEL'])} />, client);
    fireEvent.click(screen.getByTestId('action-cancel'));
    const dialog = screen.getByRole('dialog');
    expect(within(dialog).getByText('Cancel task NOOP-1?')).toBeTruthy();
    expect(client.executeMutation).not.toHaveBeenCalled();
    fireEvent.change(within(dialog).getByTestId('cancel-reason'), { target: { value: 'wrong input' } });
    fireEvent.click(within(dialog).getByTestId('confirm-yes'));
    await waitFor(() => expect(client.executeMutation).toHaveBeenCalledTimes(1));
    expect(client.executeMutation.mock.calls[0][0].variables).toEqual({ id: '7', reason: 'wrong input' });
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
  });

  it('closes the dialog on Escape without cancelling', () => {
    const client = mockClient();
    wrap(<ActionButtons task={task(['CANCEL'])} />, client);
    fireEvent.click(screen.getByTestId('action-cancel'));
    fireEvent.keyDown(window, { key: 'Escape' });
    expect(screen.queryByRole('dialog')).toBeNull();
    expect(client.executeMutation).not.toHaveBeenCalled();
  });
});

describe('ProgressBar', () => {
  it('reports its value to assistive technology', () => {
    wrap(<ProgressBar done={25} total={100} status="EXECUTING" />);
    expect(screen.getByRole('progressbar').getAttribute('aria-valuenow')).toBe('25');
    expect(screen.getByText('25 / 100 · 25%')).toBeTruthy();
  });
  it('is indeterminate while running without a total', () => {
    wrap(<ProgressBar done={0} total={0} status="EXECUTING" />);
    expect(screen.getByRole('progressbar').getAttribute('aria-valuenow')).toBeNull();
  });
});

describe('ConnectionBanner', () => {
  it('appears when the connection is lost and goes when it is back', () => {
    markConnected();
    wrap(<ConnectionBanner />);
    expect(screen.queryByTestId('connection-lost')).toBeNull();
    act(() => markLost(Date.now() + 5000));
    expect(screen.getByTestId('connection-lost').textContent).toMatch(/Reconnecting in \d s/);
    act(() => markConnected());
    expect(screen.queryByTestId('connection-lost')).toBeNull();
    expect(screen.getByTestId('connection-restored')).toBeTruthy();
  });
});

describe('Launch', () => {
  const types = {
    taskTypes: [
      {
        __typename: 'TaskType',
        name: 'noop',
        description: 'Does nothing',
        defaultTimeoutSeconds: 300,
        defaultRetryPolicy: 'none',
        inputSchema: { type: 'object', properties: { sleepMs: { type: 'integer', minimum: 0 }, note: { type: 'string' } } },
      },
    ],
    retryPolicies: [{ __typename: 'RetryPolicy', name: 'none', description: '', maxAttempts: 1, backoffSeconds: [] }],
  };

  it('generates the form from the input schema and creates the task', async () => {
    const client = mockClient((op) =>
      op.kind === 'mutation' ? { createTask: { __typename: 'Task', id: '42', code: 'NOOP-42' } } : types,
    );
    const push = vi.spyOn(window.history, 'pushState');
    wrap(<Launch type="noop" />, client);
    fireEvent.change(screen.getByTestId('input-sleepMs'), { target: { value: '-5' } });
    fireEvent.click(screen.getByTestId('launch-submit'));
    expect(await screen.findByText('At least 0.')).toBeTruthy();
    expect(client.executeMutation).not.toHaveBeenCalled();

    fireEvent.change(screen.getByTestId('input-sleepMs'), { target: { value: '1500' } });
    fireEvent.change(screen.getByTestId('opt-title'), { target: { value: 'smoke' } });
    fireEvent.click(screen.getByTestId('launch-submit'));
    await waitFor(() => expect(client.executeMutation).toHaveBeenCalledTimes(1));
    expect(client.executeMutation.mock.calls[0][0].variables.input).toMatchObject({ type: 'noop', input: { sleepMs: 1500 }, title: 'smoke' });
    await waitFor(() => expect(push).toHaveBeenCalled());
    expect(String(push.mock.calls.at(-1)?.[2])).toBe(href('/tasks/42'));
  });
});

describe('CountText', () => {
  it('shows a count as it is, and an estimate as ≈ with its interval', () => {
    const { container } = wrap(
      <>
        <span data-testid="exact">
          <CountText c={{ count: 12, low: 12, high: 12 }} exact={true} sampled={0} />
        </span>
        <span data-testid="estimate">
          <CountText c={{ count: 3300000, low: 3250000, high: 3350000 }} exact={false} sampled={0.004} />
        </span>
      </>,
    );
    expect(screen.getByTestId('exact').textContent).toBe('12');
    expect(screen.getByTestId('estimate').textContent).toBe('≈3300000');
    const est = container.querySelector('[data-estimate]');
    expect(est?.getAttribute('title')).toBe('Estimated from 1% of the table: 95% between 3250000 and 3350000');
  });
});
