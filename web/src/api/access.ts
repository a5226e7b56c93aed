// What the signed-in viewer may do, as far as the console needs to know it
// to show or hide the Tenants page. The API has no query of the viewer's
// role, so it is read from two answers: a platform administrator may read
// any tenant's quota (anyone else naming another tenant is FORBIDDEN), and
// an admin may list the external workers (operators and viewers are
// FORBIDDEN). Without a token the server authenticates nobody and every
// request acts as a platform administrator (docs/access.md, open mode).
import { gql, useQuery } from 'urql';

// A tenant nobody is in: naming it is FORBIDDEN unless one is a platform
// administrator (for whom it is a tenant without a quota).
export const PROBE_TENANT = '~console-access-probe~';

export const PLATFORM_PROBE = gql`
  query AccessPlatform($tenant: String) {
    tenantQuota(tenant: $tenant) { tenant }
  }
`;

export const ADMIN_PROBE = gql`
  query AccessAdmin {
    externalWorkers { tenant name }
  }
`;

/** What the viewer may do; known is false while it is being read. */
export interface Access {
  known: boolean;
  /** May set any tenant's quota. */
  platform: boolean;
  /** May read their own tenant's quota page (an admin of a tenant). */
  admin: boolean;
}

/** useAccess reads what the viewer may do (signedIn: the console holds a token). */
export function useAccess(signedIn: boolean): Access {
  const [p] = useQuery({ query: PLATFORM_PROBE, variables: { tenant: PROBE_TENANT }, pause: !signedIn });
  const [a] = useQuery({ query: ADMIN_PROBE, pause: !signedIn });
  if (!signedIn) return { known: true, platform: true, admin: true };
  const platform = !!p.data && !p.error;
  const admin = platform || (!!a.data && !a.error);
  const answered = (r: { data?: unknown; error?: unknown }) => r.data !== undefined || r.error !== undefined;
  const known = answered(p) && (platform || answered(a));
  return { known, platform, admin };
}
