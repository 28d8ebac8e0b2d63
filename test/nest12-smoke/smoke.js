'use strict';
/*
 * Smoke test: the built nest-dedup-queue library inside a NestJS 12 application.
 *
 * NestJS 12 ships ESM only; this script is CommonJS and relies on Node >= 20.19 being able to `require()` ES
 * modules. Plain JavaScript, so decorators are applied by calling them.
 *
 * Run it through .ci/nest12-smoke.sh, which installs this folder's lockfile and copies the built library into
 * ./node_modules/nest-dedup-queue, so that the library's own `require('@nestjs/common')` etc. resolve to the
 * NestJS 12 copies installed here rather than the workspace's NestJS 11.
 *
 * Needs DATABASE_URL (a real Postgres). Uses a fresh schema per run and drops it at the end.
 */
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const TIMEOUT_MS = Number(process.env.SMOKE_TIMEOUT_MS || 60_000);
const HERE = __dirname;
const LOCAL_MODULES = path.join(HERE, 'node_modules');

let finished = false;
function finish(error) {
  if (finished) return;
  finished = true;
  if (error) {
    console.error('nest12-smoke: FAILED:', error && error.stack ? error.stack : error);
    console.log('nest12-smoke: 0 passed, 1 failed');
    process.exit(1);
  }
  console.log('nest12-smoke: 1 passed, 0 failed');
  process.exit(0);
}

// Never hang: whatever happens, the process ends within TIMEOUT_MS (plus at most 5 s of best-effort cleanup).
let dropSchema; // set once the schema name is known
const watchdog = setTimeout(() => {
  const error = new Error(`timed out after ${TIMEOUT_MS} ms (last step: ${currentStep})`);
  if (!dropSchema) return finish(error);
  const cleanup = dropSchema().catch((e) => console.error('nest12-smoke: dropping the schema failed:', e));
  Promise.race([cleanup, new Promise((resolve) => setTimeout(resolve, 5_000))]).then(() => finish(error));
}, TIMEOUT_MS);
process.on('unhandledRejection', (reason) => finish(reason));
process.on('uncaughtException', (error) => finish(error));

let currentStep = 'start';
function step(name) {
  currentStep = name;
  console.log(`nest12-smoke: ${name}`);
}

function isInside(file, dir) {
  const rel = path.relative(dir, file);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
}

async function main() {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is not set');

  // ---------------------------------------------------------------------------------------------------------------
  step('checking module resolution');
  require('reflect-metadata');

  // @nestjs/* 12 declare `exports` with "./package.json", so reading the version this way works.
  const coreVersion = require('@nestjs/core/package.json').version;
  const commonVersion = require('@nestjs/common/package.json').version;
  const expressVersion = require('@nestjs/platform-express/package.json').version;
  assert.match(coreVersion, /^12\./, `@nestjs/core loaded by the app is ${coreVersion}, expected 12.x`);
  assert.match(commonVersion, /^12\./, `@nestjs/common loaded by the app is ${commonVersion}, expected 12.x`);
  assert.match(expressVersion, /^12\./, `@nestjs/platform-express is ${expressVersion}, expected 12.x`);

  // The library must be the copy in this folder's node_modules (a real directory, not a symlink): otherwise
  // Node would walk up to the workspace root and the library would load NestJS 11.
  const libraryEntry = require.resolve('nest-dedup-queue');
  const libraryRoot = path.join(LOCAL_MODULES, 'nest-dedup-queue');
  assert.ok(
    isInside(libraryEntry, libraryRoot),
    `nest-dedup-queue resolved to ${libraryEntry}, expected a copy under ${libraryRoot} (run .ci/nest12-smoke.sh)`,
  );
  assert.ok(!fs.lstatSync(libraryRoot).isSymbolicLink(), `${libraryRoot} must be a real copy, not a symlink`);
  const libraryDir = path.dirname(libraryEntry);

  for (const name of ['@nestjs/common', '@nestjs/core', 'typeorm', 'pg', 'rxjs', 'reflect-metadata']) {
    const fromApp = require.resolve(name);
    const fromLibrary = require.resolve(name, { paths: [libraryDir] });
    assert.equal(fromLibrary, fromApp, `the library resolves ${name} to ${fromLibrary}, the app to ${fromApp}`);
    assert.ok(isInside(fromApp, LOCAL_MODULES), `${name} resolved outside ${LOCAL_MODULES}: ${fromApp}`);
  }

  // ---------------------------------------------------------------------------------------------------------------
  step(`loading @nestjs/core ${coreVersion} (ESM, via require) and the library`);
  const { Injectable, Controller, Post, Param, UseFilters } = require('@nestjs/common');
  const { NestFactory } = require('@nestjs/core');
  const { Client } = require('pg');
  const lib = require('nest-dedup-queue');
  const { DedupQueueModule, Workflow, QueueService, DedupExceptionFilter, QueueDeduplicatedError } = lib;
  for (const [name, value] of Object.entries({ DedupQueueModule, Workflow, QueueService, DedupExceptionFilter })) {
    assert.equal(typeof value, 'function', `nest-dedup-queue export ${name} is missing`);
  }
  // Same module instances on both sides (the decorator metadata and DI tokens rely on it).
  assert.equal(require(require.resolve('@nestjs/common', { paths: [libraryDir] })).Injectable, Injectable);

  const schema = `smoke12_${crypto.randomBytes(6).toString('hex')}`;
  dropSchema = async () => {
    const client = new Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5_000 });
    client.on('error', () => {});
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    } finally {
      await client.end();
    }
  };
  let app;
  let release;
  const released = new Promise((resolve) => (release = resolve));
  const calls = [];
  let onCall = () => {};

  try {
    // -------------------------------------------------------------------------------------------------------------
    // The application, decorators applied by hand.
    class UserTasks {
      async process(userId) {
        calls.push(userId);
        onCall(userId);
        await released;
        return { userId };
      }
    }
    Injectable()(UserTasks);
    Workflow()(UserTasks.prototype, 'process', Object.getOwnPropertyDescriptor(UserTasks.prototype, 'process'));

    class ProcessController {
      constructor(queueService, userTasks) {
        this.queueService = queueService;
        this.userTasks = userTasks;
      }
      async process(userId) {
        const handle = await this.queueService.enqueue('user_tasks', this.userTasks.process, [userId], {
          deduplicationId: userId,
        });
        return { workflow_id: handle.workflowId };
      }
    }
    Controller('process')(ProcessController);
    UseFilters(DedupExceptionFilter)(ProcessController);
    Reflect.defineMetadata('design:paramtypes', [QueueService, UserTasks], ProcessController);
    Post(':userId')(
      ProcessController.prototype,
      'process',
      Object.getOwnPropertyDescriptor(ProcessController.prototype, 'process'),
    );
    Param('userId')(ProcessController.prototype, 'process', 0);

    const { Module } = require('@nestjs/common');
    class AppModule {}
    Module({
      imports: [
        DedupQueueModule.forRoot({ connection: { url: databaseUrl }, schema, queues: [{ name: 'user_tasks' }] }),
      ],
      controllers: [ProcessController],
      providers: [UserTasks],
    })(AppModule);

    // -------------------------------------------------------------------------------------------------------------
    step(`starting the app (schema ${schema})`);
    app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    const { port } = app.getHttpServer().address();
    const base = `http://127.0.0.1:${port}`;
    const queueService = app.get(QueueService);

    const post = async (userId) => {
      const response = await fetch(`${base}/process/${encodeURIComponent(userId)}`, { method: 'POST' });
      const text = await response.text();
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      return { status: response.status, body };
    };

    // -------------------------------------------------------------------------------------------------------------
    step('POST /process/u1 (first)');
    const startedU1 = new Promise((resolve) => {
      onCall = (userId) => userId === 'u1' && resolve();
    });
    const first = await post('u1');
    assert.equal(first.status, 201, `first POST: expected 201, got ${first.status} ${JSON.stringify(first.body)}`);
    assert.equal(typeof first.body.workflow_id, 'string', `first POST body: ${JSON.stringify(first.body)}`);
    assert.ok(first.body.workflow_id.length > 0);
    const firstId = first.body.workflow_id;

    step('waiting for the worker to start the workflow');
    await startedU1; // @Workflow() discovered and run by the worker under NestJS 12

    step('POST /process/u1 (duplicate while running)');
    const second = await post('u1');
    assert.equal(second.status, 409, `second POST: expected 409, got ${second.status} ${JSON.stringify(second.body)}`);
    assert.equal(second.body.statusCode, 409);
    assert.equal(second.body.queueName, 'user_tasks');
    assert.equal(second.body.deduplicationId, 'u1');
    assert.equal(second.body.existingWorkflowId, firstId);
    assert.equal(typeof second.body.message, 'string');

    // Direct call: the error class is exported and thrown as documented.
    await assert.rejects(
      queueService.enqueue('user_tasks', 'UserTasks.process', ['u1'], { deduplicationId: 'u1' }),
      (error) =>
        error instanceof QueueDeduplicatedError &&
        error.name === 'QueueDeduplicatedError' &&
        error.existingWorkflowId === firstId,
    );

    step('releasing the workflow and awaiting its result');
    release();
    const handle = await queueService.retrieve(firstId);
    assert.equal(handle.workflowId, firstId);
    assert.deepEqual(await handle.getResult(), { userId: 'u1' });
    assert.equal((await handle.getStatus()).status, 'SUCCESS');

    step('POST /process/u1 (after completion)');
    const third = await post('u1');
    assert.equal(third.status, 201, `third POST: expected 201, got ${third.status} ${JSON.stringify(third.body)}`);
    assert.equal(typeof third.body.workflow_id, 'string');
    assert.notEqual(third.body.workflow_id, firstId);
    // Let it finish (the release promise is already resolved) so that close() does not interrupt it.
    assert.deepEqual(await (await queueService.retrieve(third.body.workflow_id)).getResult(), { userId: 'u1' });
    assert.deepEqual(calls, ['u1', 'u1']);

    step('closing the app');
    const closing = app;
    app = undefined;
    await closing.close();
  } finally {
    if (release) release();
    if (app) await app.close().catch((error) => console.error('nest12-smoke: app.close() failed:', error));
    step(`dropping schema ${schema}`);
    await dropSchema();
  }
}

main().then(
  () => {
    clearTimeout(watchdog);
    finish();
  },
  (error) => finish(error),
);
