#!/bin/sh
# Fails when the committed bundle (web/dist, embedded in the Go binary) is
# not what the sources build to. Fix: `npm run build` in web/, commit dist.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npx tsc --noEmit
CONSOLE_OUT_DIR="$tmp/dist" npx vite build --logLevel warn
if ! diff -r dist "$tmp/dist" >"$tmp/diff.txt"; then
  head -n 40 "$tmp/diff.txt" >&2
  echo "web/dist is stale: run 'npm run build' in web/ and commit web/dist" >&2
  exit 1
fi
echo "web/dist matches the sources"
