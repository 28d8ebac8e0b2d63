#!/usr/bin/env bash
# Smoke test: the built nest-dedup-queue library inside a NestJS 12 (ESM-only) application.
#
# Expects the library to be built already (`npm run build` at the repository root) and DATABASE_URL to point at a
# real Postgres. Installs test/nest12-smoke from its own lockfile (it is not a workspace), copies the built library
# into its node_modules (a real copy, so the library's peer dependencies resolve to NestJS 12 there, not to the
# workspace's NestJS 11), then runs test/nest12-smoke/smoke.js.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
LIB="$ROOT/packages/nest-dedup-queue"
SMOKE="$ROOT/test/nest12-smoke"

if [[ ! -f "$LIB/dist/index.js" ]]; then
  echo "nest12-smoke: $LIB/dist/index.js not found: build the library first (npm run build at the repository root)" >&2
  exit 1
fi
if [[ -z "${DATABASE_URL:-}" ]]; then
  echo "nest12-smoke: DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres)" >&2
  exit 1
fi

cd "$SMOKE"
echo "nest12-smoke: npm ci in test/nest12-smoke"
npm ci --no-audit --no-fund

TARGET="$SMOKE/node_modules/nest-dedup-queue"
rm -rf "$TARGET"
mkdir -p "$TARGET"
cp "$LIB/package.json" "$TARGET/package.json"
cp -R "$LIB/dist" "$TARGET/dist"
echo "nest12-smoke: copied $(cd "$LIB" && pwd)/{package.json,dist} to $TARGET"

node smoke.js
