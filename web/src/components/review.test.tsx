import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import type { ReactNode } from 'react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { I18nProvider, translator, type Lang } from '../i18n';
import { FieldDiff } from './InputVersions';
import { ReviewQueue } from '../pages/Review';
import { decisionMessage, ReviewDecisions, type DecisionTarget } from './ReviewDecisions';

type Answer = { data?: unknown; errors?: { message: string; extensions: Record<string, unknown> }[] };

function mockClient(answer: (name: string, vars: Record<string, unknown>) => Answer = () => ({ data: {} })) {
  type Req = { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> };
  const respond = (op: Req) => {
    const a = answer(op.query.definitions[0]?.name?.value ?? '', op.variables);
    const error = a.errors
      ? Object.assign(new Error(a.errors[0].message), { graphQLErrors: a.errors, networkError: undefined, response: undefined })
      : undefined;
    return fromValue({ operation: op, data: a.data, error, stale: false, hasNext: false });
  };
  return {
    executeQuery: vi.fn(respond),
    executeMutation: vi.fn(respond),
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

const task = (actions: DecisionTarget['availableActions'], fourEyes = false): DecisionTarget => ({
  id: '9',
  code: 'IMPORT-9',
  availableActions: actions,
  input: { file: 'a.xlsx', password: '******' },
  review: { fourEyes, submittedBy: 'ann' },
});

const ALL = ['APPROVE_REVIEW', 'EDIT_AND_RETRY', 'ACCEPT_REVIEW', 'REJECT_REVIEW'] as const;

describe('ReviewDecisions', () => {
  it('offers exactly the decisions the task allows, none to a viewer', () => {
    const { rerender } = wrap(<ReviewDecisions task={task([...ALL])} />);
    for (const a of ALL) expect(screen.getByTestId(`decide-${a}`)).toBeTruthy();
    expect(screen.queryByTestId('decide-REPLAY_WITH_INPUT')).toBeNull();
    rerender(
      <I18nProvider lang="en">
        <Provider value={mockClient()}>
          <ReviewDecisions task={task([])} />
        </Provider>
      </I18nProvider>,
    );
    expect(screen.queryByRole('button')).toBeNull();
  });

  it('rejects only with a reason', async () => {
    const client = mockClient(() => ({ data: { rejectReview: { __typename: 'Task', id: '9' } } }));
    const decided = vi.fn();
    wrap(<ReviewDecisions task={task([...ALL])} onDecided={decided} />, client);
    fireEvent.click(screen.getByTestId('decide-REJECT_REVIEW'));
    const dialog = screen.getByRole('dialog');
    fireEvent.click(within(dialog).getByTestId('confirm-yes'));
    expect(within(dialog).getByTestId('decision-reason-missing')).toBeTruthy();
    expect(client.executeMutation).not.toHaveBeenCalled();
    fireEvent.change(within(dialog).getByTestId('decision-reason'), { target: { value: 'the file is from another month' } });
    fireEvent.click(within(dialog).getByTestId('confirm-yes'));
    await waitFor(() => expect(client.executeMutation).toHaveBeenCalledTimes(1));
    expect(client.executeMutation.mock.calls[0][0].variables).toEqual({ id: '9', reason: 'the file is from another month' });
    await waitFor(() => expect(decided).toHaveBeenCalledWith('REJECT_REVIEW'));
  });

  it('says plainly that the submitter may not decide under four eyes', async () => {
    const client = mockClient(() => ({ errors: [{ message: 'the submitter may not decide', extensions: { code: 'FORBIDDEN' } }] }));
    wrap(<ReviewDecisions task={task([...ALL], true)} />, client);
    fireEvent.click(screen.getByTestId('decide-APPROVE_REVIEW'));
    fireEvent.click(within(screen.getByRole('dialog')).getByTestId('confirm-yes'));
    const err = await screen.findByTestId('decision-error');
    expect(err.dataset.code).toBe('FORBIDDEN');
    expect(err.textContent).toContain('another person must decide');
  });

  it('keeps the edited text and shows the server’s validation problems inline', async () => {
    const client = mockClient(() => ({
      errors: [{ message: 'invalid input', extensions: { code: 'VALIDATION', problems: [{ field: 'input', message: 'at /file: must be a string' }] } }],
    }));
    wrap(<ReviewDecisions task={task([...ALL])} />, client);
    fireEvent.click(screen.getByTestId('decide-EDIT_AND_RETRY'));
    const box = screen.getByTestId('input-editor-json') as HTMLTextAreaElement;
    expect(JSON.parse(box.value)).toEqual({ file: 'a.xlsx', password: '******' });
    fireEvent.change(box, { target: { value: '{"file": 3' } });
    fireEvent.click(screen.getByTestId('input-editor-submit'));
    expect(screen.getByTestId('input-editor-local-error').textContent).toMatch(/Not valid JSON/);
    expect(client.executeMutation).not.toHaveBeenCalled();
    fireEvent.change(box, { target: { value: '{"file": 3}' } });
    fireEvent.click(screen.getByTestId('input-editor-submit'));
    expect(screen.getByTestId('input-editor-reason-missing')).toBeTruthy();
    fireEvent.change(screen.getByTestId('input-editor-reason'), { target: { value: 'fix the file' } });
    fireEvent.click(screen.getByTestId('input-editor-submit'));
    await waitFor(() => expect(client.executeMutation).toHaveBeenCalledTimes(1));
    expect(client.executeMutation.mock.calls[0][0].variables).toEqual({ id: '9', input: { file: 3 }, reason: 'fix the file' });
    expect((await screen.findByTestId('input-editor-problem')).textContent).toBe('input: at /file: must be a string');
    expect((screen.getByTestId('input-editor-json') as HTMLTextAreaElement).value).toBe('{"file": 3}');
  });

  it('replays a FAILED task with an edited input', async () => {
    const client = mockClient(() => ({ data: { replayWithInput: { __typename: 'Task', id: '9' } } }));
    const decided = vi.fn();
    wrap(<ReviewDecisions task={task(['RETRY', 'REPLAY_WITH_INPUT'])} onDecided={decided} />, client, 'zh');
    fireEvent.click(screen.getByTestId('decide-REPLAY_WITH_INPUT'));
    expect(screen.getByText('修改输入后重放 IMPORT-9')).toBeTruthy();
    fireEvent.change(screen.getByTestId('input-editor-reason'), { target: { value: '换文件' } });
    fireEvent.click(screen.getByTestId('input-editor-submit'));
    await waitFor(() => expect(decided).toHaveBeenCalledWith('REPLAY_WITH_INPUT'));
    expect(client.executeMutation.mock.calls[0][0].query.definitions[0].name.value).toBe('ReplayWithInput');
  });
});

describe('decisionMessage', () => {
  const t = translator('en');
  it('tells a lost race from a refusal', () => {
    expect(decisionMessage({ code: 'INVALID_TRANSITION', message: '', extensions: {} }, false, t)).toMatch(/decided on this task first/);
    expect(decisionMessage({ code: 'FORBIDDEN', message: 'viewers cannot decide', extensions: {} }, false, t)).toMatch(/not allowed/);
  });
});

describe('FieldDiff', () => {
  it('shows a masked field as changed, with neither value', () => {
    wrap(
      <FieldDiff
        changes={[
          { path: '/file', kind: 'CHANGED', masked: false, before: 'a.xlsx', after: 'b.xlsx' },
          { path: '/password', kind: 'CHANGED', masked: true, before: null, after: null },
          { path: '/dryRun', kind: 'ADDED', masked: false, before: null, after: true },
        ]}
      />,
    );
    const rows = screen.getAllByTestId('diff-row');
    expect(rows.map((r) => r.dataset.path)).toEqual(['/file', '/password', '/dryRun']);
    expect(within(rows[0]).getByTestId('diff-before').textContent).toBe('"a.xlsx"');
    expect(within(rows[0]).getByTestId('diff-after').textContent).toBe('"b.xlsx"');
    expect(rows[1].textContent).toContain('changed (sensitive');
    expect(within(rows[1]).queryByTestId('diff-before')).toBeNull();
    expect(within(rows[2]).getByTestId('diff-before').textContent).toBe('—');
  });
});

describe('ReviewQueue bulk decisions', () => {
  const row = (id: string) => ({
    __typename: 'Task',
    id,
    code: `WEBHOOK-${id}`,
    type: 'webhook',
    title: `t${id}`,
    bizID: '',
    status: 'REVIEW_PENDING',
    owner: 'ann',
    priority: 5,
    progressDone: 0,
    progressTotal: 0,
    createdAt: '2026-12-02T10:00:00Z',
    updatedAt: '2026-12-02T10:00:00Z',
    finishedAt: null,
    cancelRequested: false,
    availableActions: ['CANCEL', 'APPROVE_REVIEW', 'EDIT_AND_RETRY', 'ACCEPT_REVIEW', 'REJECT_REVIEW'],
    lastError: 'answered 400',
    result: null,
    tenant: '',
    review: null,
  });
  const queue = (ids: string[]) => ({
    reviewQueue: {
      __typename: 'TaskConnection',
      totalCount: ids.length,
      pageInfo: { __typename: 'PageInfo', hasNextPage: false, hasPreviousPage: false, startCursor: null, endCursor: null },
      edges: ids.map((id) => ({ __typename: 'TaskEdge', cursor: id, node: row(id) })),
    },
  });

  // matching: how many the ids query finds when the decision is sent.
  function client(matching: string[]) {
    const answer = (name: string): Answer => {
      if (name === 'ReviewQueue' || name === 'ReviewQueueIds') return { data: name === 'ReviewQueue' ? queue(['1', '2']) : queue(matching) };
      if (name === 'ReviewQueueStats') return { data: { reviewQueueStats: { __typename: 'ReviewQueueStats', size: 2, oldestSince: null, overdue: 0, oldest: null } } };
      if (name === 'RejectReviews') return { data: { rejectReviews: matching.map((id) => ({ __typename: 'TaskActionResult', id, ok: true, task: null, error: null })) } };
      return { data: { taskTypes: [] } };
    };
    const c = mockClient(answer);
    // client.query(...).toPromise(), as the bulk dialog reads the count and the ids.
    Object.assign(c, {
      query: vi.fn((doc: { definitions: { name?: { value: string } }[] }) => ({
        toPromise: () => Promise.resolve(answer(doc.definitions[0]?.name?.value ?? '')),
      })),
    });
    return c;
  }

  async function openReject(c: ReturnType<typeof client>) {
    wrap(<ReviewQueue />, c);
    await screen.findAllByTestId('review-row');
    fireEvent.click(screen.getByTestId('review-bulk-reject'));
    const dialog = screen.getByTestId('review-bulk-dialog');
    await within(dialog).findByTestId('review-bulk-summary');
    fireEvent.change(within(dialog).getByTestId('review-bulk-typed'), { target: { value: '2' } });
    expect((within(dialog).getByTestId('confirm-yes') as HTMLButtonElement).disabled).toBe(true);
    fireEvent.change(within(dialog).getByTestId('review-bulk-reason'), { target: { value: 'withdrawn' } });
    expect((within(dialog).getByTestId('confirm-yes') as HTMLButtonElement).disabled).toBe(false);
    fireEvent.click(within(dialog).getByTestId('confirm-yes'));
    return dialog;
  }

  it('rejects every matching task once the count is typed and a reason given', async () => {
    const c = client(['1', '2']);
    await openReject(c);
    const result = await screen.findByTestId('review-bulk-result');
    expect(result.dataset.ok).toBe('2');
    const sent = c.executeMutation.mock.calls.map((call) => call[0]);
    expect(sent).toHaveLength(1);
    expect(sent[0].variables).toEqual({ ids: ['1', '2'], reason: 'withdrawn' });
  });

  it('sends nothing when the number matching changed, and asks again', async () => {
    const c = client(['1', '2', '3']);
    const dialog = await openReject(c);
    expect((await within(dialog).findByTestId('review-bulk-changed')).textContent).toMatch(/3 match now/);
    expect(c.executeMutation).not.toHaveBeenCalled();
    expect((within(dialog).getByTestId('review-bulk-typed') as HTMLInputElement).value).toBe('');
  });
});
