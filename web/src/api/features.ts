// Feature detection without introspection (which the server may turn off):
// send a document that uses the field but omits a required variable. A
// server that has the field fails variable validation ("must be defined")
// and runs nothing; a server without it fails document validation with
// "Cannot query field". Either way nothing executes.
import { useEffect, useState } from 'react';
import { authHeaders, GRAPHQL_PATH } from './client';
import { auth, requireLogin, useConnection } from './session';

export type Probe = 'present' | 'absent' | 'unknown';

interface RawResponse {
  errors?: { message: string; extensions?: { code?: string } }[];
  data?: unknown;
}

// classifyProbe reads the answer to a probe for field (on any type).
export function classifyProbe(status: number, body: RawResponse | null, field: string): Probe {
  if (status === 401 || status === 403) return 'unknown';
  if (!body) return 'unknown';
  const errors = body.errors ?? [];
  if (errors.some((e) => e.extensions?.code === 'UNAUTHENTICATED' || e.extensions?.code === 'FORBIDDEN')) return 'unknown';
  const missing = errors.some(
    (e) =>
      (e.message.includes('Cannot query field') && e.message.includes(`"${field}"`)) ||
      /Unknown type "?(Upload|ArtifactKind|DownloadLink)"?/.test(e.message),
  );
  if (missing) return 'absent';
  // Variable validation failed (or, unexpectedly, it ran): the field exists.
  return 'present';
}

async function probe(query: string, field: string): Promise<Probe> {
  try {
    const res = await fetch(GRAPHQL_PATH, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders(auth.get().token) },
      body: JSON.stringify({ query, variables: {} }),
    });
    if (res.status === 401) requireLogin();
    let body: RawResponse | null = null;
    try {
      body = (await res.json()) as RawResponse;
    } catch {
      body = null;
    }
    return classifyProbe(res.status, body, field);
  } catch {
    return 'unknown';
  }
}

export interface Features {
  importFile: Probe;
  // Where artifactDownloadUrl lives: the design calls it a mutation (it
  // mints a link); accept a query field too.
  artifactDownload: 'mutation' | 'query' | 'absent' | 'unknown';
}

export const IMPORT_PROBE = 'mutation ProbeImport($file: Upload!) { importFile(file: $file, target: "") { id } }';
const ARTIFACT_FIELDS = 'artifactDownloadUrl(taskId: $t) { url }';

export async function detectFeatures(): Promise<Features> {
  const [importFile, asMutation] = await Promise.all([
    probe(IMPORT_PROBE, 'importFile'),
    probe(`mutation ProbeArtifact($t: ID!) { ${ARTIFACT_FIELDS} }`, 'artifactDownloadUrl'),
  ]);
  if (asMutation === 'present') return { importFile, artifactDownload: 'mutation' };
  if (asMutation === 'unknown') return { importFile, artifactDownload: 'unknown' };
  const asQuery = await probe(`query ProbeArtifact($t: ID!) { ${ARTIFACT_FIELDS} }`, 'artifactDownloadUrl');
  return { importFile, artifactDownload: asQuery === 'present' ? 'query' : asQuery };
}

let cached: Features | null = null;

// useFeatures probes once, and again after a reconnect while unknown.
export function useFeatures(): Features {
  const { epoch } = useConnection();
  const [features, setFeatures] = useState<Features>(cached ?? { importFile: 'unknown', artifactDownload: 'unknown' });
  useEffect(() => {
    if (cached && cached.importFile !== 'unknown' && cached.artifactDownload !== 'unknown') return;
    let live = true;
    void detectFeatures().then((f) => {
      if (f.importFile !== 'unknown' && f.artifactDownload !== 'unknown') cached = f;
      if (live) setFeatures(f);
    });
    return () => {
      live = false;
    };
  }, [epoch]);
  return features;
}

export function resetFeatures() {
  cached = null;
}
