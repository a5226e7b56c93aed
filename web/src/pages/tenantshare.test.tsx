import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { I18nProvider } from '../i18n';
import { TenantShareCard } from './Dashboard';

describe('TenantShareCard', () => {
  const wrap = (rows: { tenant: string; running: number }[] | undefined) =>
    render(
      <I18nProvider lang="en">
        <TenantShareCard rows={rows} />
      </I18nProvider>,
    );

  it("shows each tenant's share of what runs, the empty tenant named", () => {
    wrap([
      { tenant: 'acme', running: 3 },
      { tenant: '', running: 1 },
    ]);
    const rows = screen.getAllByTestId('tenant-share-row');
    expect(rows.map((r) => [r.dataset.tenant, r.dataset.running])).toEqual([
      ['acme', '3'],
      ['', '1'],
    ]);
    expect(rows[0].textContent).toContain('3 · 75%');
    expect(rows[1].textContent).toContain('(no tenant)');
    expect(rows[1].textContent).toContain('1 · 25%');
    expect(screen.getByTestId('dash-tenant-share').dataset.total).toBe('4');
  });

  it('says when nothing runs', () => {
    wrap([]);
    expect(screen.getByText('Nothing runs now.')).toBeTruthy();
    expect(screen.queryAllByTestId('tenant-share-row')).toHaveLength(0);
  });
});
