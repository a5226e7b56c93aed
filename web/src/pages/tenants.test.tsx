import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { Provider, type Client } from 'urql';
import { describe, expect, it, vi } from 'vitest';
import { fromValue, never } from 'wonka';
import { I18nProvider } from '../i18n';
import { en } from '../i18n/en';
import { draftOf, QUOTA_FIELDS, quotaInput, Tenants } from './Tenants';

// Node's fs, without the console's types depending on Node's.
const fsName = 'node:fs';
const fs = (await import(/* @vite-ignore */ fsName)) as { readFileSync(p: string, enc: 'utf8'): string };
const cwd = (globalThis as unknown as { process: { cwd(): string } }).process.cwd();

describe('quota fields', () => {
  it('are the numbers of TenantQuotaInput (a new one of the API fails here until it is listed), each labelled', () => {
    const sdl = fs.readFileSync(`${cwd}/../graph/schema/tenants.graphql`, 'utf8');
    const body = /input TenantQuotaInput \{([^}]*)\}/.exec(sdl)![1];
    const numbers = [...body.matchAll(/^\s*(\w+): (Int|Float)\b/gm)].map((m) => [m[1], m[2] === 'Int']);
    expect(QUOTA_FIELDS.map((f) => [f.key, f.integer]).sort()).toEqual(numbers.sort());
    for (const f of QUOTA_FIELDS) expect(en[`tenants.field.${f.key}` as keyof typeof en]).toBeTruthy();
  });

  it('read empty as no limit, and refuse what is not a whole number', () => {
    expect(draftOf({ weight: 2, maxWaiting: 5, maxSchedules: null, ratePeriodSeconds: 60 })).toEqual({
      weight: '2',
      maxRunning: '',
      rateLimit: '',
      ratePeriodSeconds: '60',
      maxWaiting: '5',
      maxSchedules: '',
      minScheduleIntervalSeconds: '',
    });
    expect(quotaInput({ weight: '', maxRunning: '3', rateLimit: '10', ratePeriodSeconds: '', maxWaiting: ' 5 ', maxSchedules: '', minScheduleIntervalSeconds: '-1' })).toEqual({
      input: { weight: null, maxRunning: 3, rateLimit: 10, ratePeriodSeconds: null, maxWaiting: 5, maxSchedules: null, minScheduleIntervalSeconds: -1 },
      bad: [],
    });
    expect(
      quotaInput({ weight: '1', maxRunning: '', rateLimit: '2.5', ratePeriodSeconds: '60', maxWaiting: '1.5', maxSchedules: 'x', minScheduleIntervalSeconds: '30' }).bad,
    ).toEqual(['rateLimit', 'maxWaiting', 'maxSchedules']);
  });
});

describe('Tenants page', () => {
  const quota = {
    __typename: 'TenantQuota',
    tenant: 'acme',
    weight: 1,
    maxRunning: null,
    rateLimit: 100,
    ratePeriodSeconds: 60,
    maxWaiting: 5,
    maxSchedules: null,
    minScheduleIntervalSeconds: 30,
    running: 0,
    waiting: 2,
    schedules: 1,
    startedInWindow: 100,
    nextStartAt: '2026-12-03T10:01:00Z',
    updatedBy: 'root',
    updatedAt: '2026-12-03T10:00:00Z',
  };
  function client(mutation: () => unknown) {
    const respond = (op: { query: { definitions: { name?: { value: string } }[] }; variables: Record<string, unknown> }) => {
      const name = op.query.definitions[0]?.name?.value;
      const r = name === 'SetTenantQuota' ? mutation() : { data: { tenantQuotas: [quota] } };
      return fromValue({ operation: op, stale: false, hasNext: false, ...(r as object) });
    };
    return { executeQuery: vi.fn(respond), executeMutation: vi.fn(respond), executeSubscription: vi.fn(() => never) } as unknown as Client & { executeMutation: ReturnType<typeof vi.fn> };
  }
  const wrap = (c: Client, platform: boolean) =>
    render(
      <I18nProvider lang="en">
        <Provider value={c}>
          <Tenants platform={platform} />
        </Provider>
      </I18nProvider>,
    );

  it('is read-only for a tenant admin', async () => {
    wrap(client(() => ({})), false);
    await screen.findByTestId('tenant-quota');
    expect(screen.getByTestId('quota-maxWaiting').textContent).toBe('5');
    expect(screen.getByTestId('quota-maxSchedules').textContent).toBe('no limit');
    const rate = screen.getByTestId('quota-rate-usage');
    expect(rate.dataset.started).toBe('100');
    expect(rate.textContent).toContain('Rate: 100 of 100 started in the last 60 s');
    expect(rate.textContent).toContain('held back until');
    expect(screen.queryByTestId('tenant-edit')).toBeNull();
    expect(screen.queryByTestId('quota-form')).toBeNull();
  });

  it('sends every field of a platform administrator, and shows the API problems by field', async () => {
    const { CombinedError } = await import('@urql/core');
    const c = client(() => ({
      error: new CombinedError({ graphQLErrors: [{ message: 'invalid', extensions: { code: 'VALIDATION', problems: [{ field: 'minScheduleIntervalSeconds', message: 'must be between 1 and 31622400' }] } }] }),
    }));
    wrap(c, true);
    fireEvent.click(await screen.findByTestId('tenant-edit'));
    const card = within(screen.getByTestId('tenant-quota'));
    fireEvent.change(card.getByTestId('quota-input-minScheduleIntervalSeconds'), { target: { value: '0' } });
    fireEvent.click(card.getByTestId('quota-save'));
    await waitFor(() => expect(c.executeMutation).toHaveBeenCalled());
    expect(c.executeMutation.mock.calls[0][0].variables).toEqual({ tenant: 'acme', input: { weight: 1, maxRunning: null, rateLimit: 100, ratePeriodSeconds: 60, maxWaiting: 5, maxSchedules: null, minScheduleIntervalSeconds: 0 } });
    expect((await card.findByTestId('quota-error-minScheduleIntervalSeconds')).textContent).toBe('must be between 1 and 31622400');
    expect(screen.getByTestId('tenant-new')).toBeTruthy();
  });
});
