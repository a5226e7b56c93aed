// The import upload, sent as a GraphQL multipart request
// (github.com/jaydenseric/graphql-multipart-request-spec) with XHR rather
// than fetch, because only XHR reports upload progress.
import { fromGraphQLErrors, type ApiError } from './errors';
import { authHeaders, GRAPHQL_PATH } from './client';
import { requireLogin } from './session';

export const IMPORT_FILE = `mutation ImportFile($file: Upload!, $target: String!, $options: JSON, $idempotencyKey: String) {
  importFile(file: $file, target: $target, options: $options, idempotencyKey: $idempotencyKey) { id code status }
}`;

export interface ImportArgs {
  file: File;
  target: string;
  options?: unknown;
  idempotencyKey?: string;
}

// multipartBody builds the form: operations, map, then the file as "0".
export function multipartBody(args: ImportArgs): FormData {
  const form = new FormData();
  form.append(
    'operations',
    JSON.stringify({
      query: IMPORT_FILE,
      operationName: 'ImportFile',
      variables: {
        file: null,
        target: args.target,
        options: args.options ?? null,
        idempotencyKey: args.idempotencyKey ?? null,
      },
    }),
  );
  form.append('map', JSON.stringify({ '0': ['variables.file'] }));
  form.append('0', args.file, args.file.name);
  return form;
}

// uploadHeaders are the upload's headers: the token, and a header a plain
// HTML form cannot send, which the server requires of uploads so that
// another site's page cannot post a file in the user's name.
export function uploadHeaders(token: string): Record<string, string> {
  return { ...authHeaders(token), 'Apollo-Require-Preflight': 'true' };
}

export interface ImportedTask {
  id: string;
  code: string;
  status: string;
}

export class UploadError extends Error {
  constructor(public readonly errors: ApiError[]) {
    super(errors.map((e) => e.message).join('; '));
  }
}

export function uploadImport(args: ImportArgs, token: string, onProgress: (fraction: number) => void): Promise<ImportedTask> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', GRAPHQL_PATH);
    for (const [k, v] of Object.entries(uploadHeaders(token))) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable && e.total > 0) onProgress(e.loaded / e.total);
    };
    xhr.onerror = () => reject(new UploadError([{ code: 'NETWORK', message: 'network error', extensions: {} }]));
    xhr.onload = () => {
      if (xhr.status === 401) {
        requireLogin();
        reject(new UploadError([{ code: 'UNAUTHENTICATED', message: 'unauthenticated', extensions: {} }]));
        return;
      }
      let body: { data?: { importFile?: ImportedTask | null } | null; errors?: { message: string; extensions?: Record<string, unknown> }[] };
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        reject(new UploadError([{ code: 'UNKNOWN', message: `HTTP ${xhr.status}: ${xhr.responseText.slice(0, 200)}`, extensions: {} }]));
        return;
      }
      const task = body.data?.importFile;
      if (task) resolve(task);
      else reject(new UploadError(fromGraphQLErrors(body.errors ?? [{ message: `HTTP ${xhr.status}` }])));
    };
    xhr.send(multipartBody(args));
  });
}
