#!/usr/bin/env bash
# The console's CI in one command: install (npm ci), unit and component
# tests (Vitest), the bundle staleness check, and the end-to-end tests in
# headless Chromium against the real server. Screenshots of every page are
# written to artifacts/screenshots/ at the repository root.
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)

missing=()
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
# Chinese labels in the screenshots need a CJK font.
fc-list :lang=zh 2>/dev/null | grep -q . || missing+=(fonts-wqy-microhei)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm ci starts from an empty node_modules every time; a tree this script
# installed from the same package-lock.json is what it would install again.
lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/.ci-lock-sha256 ] && [ "$(cat node_modules/.ci-lock-sha256)" = "$lock_sum" ]; then
  echo "== node_modules was installed from this package-lock.json: npm ci not needed"
else
  echo "== npm ci"
  npm ci --no-audit --no-fund
  echo "$lock_sum" > node_modules/.ci-lock-sha256
fi

echo "== vitest"
npx vitest run

echo "== bundle staleness"
sh ./check-bundle.sh

echo "== end to end"
node --test --test-reporter=spec e2e/e2e.test.mjs

echo "== console CI passed in $(( $(date +%s) - start )) s"
