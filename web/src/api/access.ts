// What the signed-in viewer may do, as far as the console needs to know it
// to show or hide the Tenants page: read from the API's `viewer` query
// (who the request's credentials are). Without a token the server
// authenticates nobody and every request acts as a platform administrator
// (docs/access.md, open mode).
import { gql, useQuery } from 'urql';

export const VIEWER = gql`
  query Viewer {
    viewer { user tenant role admin platform }
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

type ViewerData = { viewer: { user: string; tenant: string; role: string; admin: boolean; platform: boolean } };

/** useAccess reads what the viewer may do (signedIn: the console holds a token). */
export function useAccess(signedIn: boolean): Access {
  const [v] = useQuery<ViewerData>({ query: VIEWER, pause: !signedIn });
  if (!signedIn) return { known: true, platform: true, admin: true };
  const known = v.data !== undefined || v.error !== undefined;
  const viewer = v.data?.viewer;
  return { known, platform: !!viewer?.platform, admin: !!viewer && (viewer.admin || viewer.platform) };
}
