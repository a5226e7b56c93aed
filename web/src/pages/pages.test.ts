import { describe, expect, it } from 'vitest';
import type { Translate } from '../i18n';
import { en } from '../i18n/en';
import { policyLabel } from './Launch';
import { manualRetry } from './TaskDetail';
import { rangeText } from './TaskList';

describe('manualRetry', () => {
  const failed = { instanceNo: 1, errorKind: 'RETRYABLE' };
  it('is an execution that starts the attempts again', () => {
    expect(manualRetry({ instanceNo: 2, attempt: 1 }, [failed])).toBe(true);
  });
  it('is not the first execution, nor an automatic retry', () => {
    expect(manualRetry({ instanceNo: 1, attempt: 1 }, [])).toBe(false);
    expect(manualRetry({ instanceNo: 2, attempt: 2 }, [failed])).toBe(false);
  });
  it('is not the execution after an interruption (which keeps its attempt)', () => {
    expect(manualRetry({ instanceNo: 2, attempt: 1 }, [{ instanceNo: 1, errorKind: 'INTERRUPTED' }])).toBe(false);
  });
});

describe('policyLabel', () => {
  const t: Translate = (key, vars) => en[key].replace(/\{(\w+)\}/g, (_, k: string) => String(vars?.[k] ?? ''));
  const policies = [
    { name: 'default', description: '', maxAttempts: 3, backoffSeconds: [5] },
    { name: 'none', description: '', maxAttempts: 1, backoffSeconds: [] },
  ];
  it('says how many attempts a policy makes', () => {
    expect(policyLabel('default', policies, t)).toBe('default (3 attempts)');
    expect(policyLabel('none', policies, t)).toBe('none (1 attempt, no retry)');
    expect(t('launch.policyTypeDefault', { policy: policyLabel('none', policies, t) })).toBe("The type's default: none (1 attempt, no retry)");
  });
});

describe('rangeText', () => {
  const t: Translate = (key, vars) => en[key].replace(/\{(\w+)\}/g, (_, k: string) => String(vars?.[k] ?? ''));
  it('gives an exact count as it is', () => {
    expect(rangeText(t, 1, 50, { count: 1234, exact: true, low: 1234, high: 1234, sampled: 0 })).toBe('1–50 of 1,234');
  });
  it('marks an estimate and says its interval and sample', () => {
    expect(rangeText(t, 51, 100, { count: 3_300_000, exact: false, low: 3_250_000, high: 3_350_000, sampled: 0.005 })).toBe(
      '51–100 of ≈3,300,000 (estimated from 1% of the table: 95% between 3,250,000 and 3,350,000)',
    );
    expect(rangeText(t, 1, 50, { count: 90, exact: false, low: 0, high: 200, sampled: 0.25 })).toContain('from 25% of the table');
  });
});
