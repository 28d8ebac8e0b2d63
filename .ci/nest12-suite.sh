#!/usr/bin/env bash
# The whole jest suite on NestJS 12, against DATABASE_URL (required). Copies the working tree (tracked and untracked
# files, not ignored ones) to a temporary directory, moves every @nestjs package to 12 there
# (.ci/nest12-manifests.js), installs from the repository's lockfile with only those packages re-resolved, and runs
# jest with .ci/nest12-jest.config.js (which compiles the ESM-only @nestjs packages for jest). Child processes of the
# suites run on plain Node, which loads NestJS 12 through require(esm). Extra arguments go to jest.
#
# NOTE: --legacy-peer-deps: npm 10 otherwise fails on optional peers nobody installs (@mikro-orm/nestjs of
# @nestjs/terminus 12 still wants NestJS 11); every peer the suite needs is a direct dependency of a workspace.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${DATABASE_URL:-}" ]]; then
  echo "nest12-suite: DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres)" >&2
  exit 1
fi
COPY="$(mktemp -d "${TMPDIR:-/tmp}/nest-dedup-queue-nest12.XXXXXX")"
trap 'rm -rf "$COPY"' EXIT

git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C "$COPY"
cd "$COPY"
node .ci/nest12-manifests.js
echo "nest12-suite: npm install in $COPY (NestJS 12)"
npm install --no-audit --no-fund --prefer-offline --legacy-peer-deps
node -e '
  for (const name of ["common", "core", "testing", "typeorm", "terminus", "platform-express", "platform-fastify"]) {
    const { version } = JSON.parse(require("fs").readFileSync(`node_modules/@nestjs/${name}/package.json`, "utf8"));
    if (!version.startsWith("12.")) throw new Error(`@nestjs/${name} is ${version}, not 12`);
    console.log(`nest12-suite: @nestjs/${name} ${version}`);
  }
'
npx jest -c .ci/nest12-jest.config.js "$@"
