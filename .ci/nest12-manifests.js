/**
 * Rewrites the workspace's manifests (in a throwaway copy of the repository) to NestJS 12: every @nestjs package
 * the workspace pins moves to the version below. NOTE: no root `overrides`: with them npm 10 installs the optional
 * peers of @nestjs/microservices and fails on their conflicts; every @nestjs package in the tree is pinned directly
 * by one of the manifests anyway. Used by .ci/nest12-suite.sh; run from the copy's root.
 */
const fs = require('node:fs');

const NEST12 = {
  '@nestjs/common': '12.5.1',
  '@nestjs/core': '12.5.1',
  '@nestjs/platform-express': '12.5.1',
  '@nestjs/platform-fastify': '12.5.0',
  '@nestjs/testing': '12.1.1',
  '@nestjs/typeorm': '12.0.2',
  '@nestjs/terminus': '12.1.0',
};

const MANIFESTS = ['package.json', 'packages/nest-dedup-queue/package.json', 'apps/demo/package.json'];

for (const file of MANIFESTS) {
  const manifest = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const field of ['dependencies', 'devDependencies']) {
    for (const name of Object.keys(manifest[field] ?? {})) {
      if (NEST12[name]) manifest[field][name] = NEST12[name];
    }
  }
  fs.writeFileSync(file, JSON.stringify(manifest, null, 2) + '\n');
}
module.exports = { NEST12 };
