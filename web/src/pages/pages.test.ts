import { describe, expect, it } from 'vitest';
import type { Translate } from '../i18n';
import { en } from '../i18n/en';
import { policyLabel } from './Launch';
import { manualRetry } from './TaskDetail';

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
