'use strict';
/*
 * The Nest module of the streams benchmark, for the writer process (it runs `StreamBench.emit`) and the reader
 * process (it only enqueues and reads): built from the library's dist/ without TypeScript decorators.
 */
const path = require('node:path');

const REPO_DIR = path.resolve(__dirname, '..', '..');
const library = require(path.join(REPO_DIR, 'packages', 'nest-dedup-queue', 'dist', 'index.js'));
const { Injectable, Module } = require(require.resolve('@nestjs/common', { paths: [REPO_DIR] }));
const { NestFactory } = require(require.resolve('@nestjs/core', { paths: [REPO_DIR] }));

const QUEUE = 'streams_bench';
const SCHEMA = 'bench_streams';

class StreamBench {
  /**
   * Writes `count` values `{ i, sentAt }` to each of `keys` at `perSecond` values per second per key (paced by the
   * clock, not awaiting each write: an append waits only for the one before it on the same stream).
   */
  async emit(keys, count, perSecond) {
    const started = Date.now();
    const writes = [];
    for (let i = 0; i < count; i++) {
      const due = started + (i * 1000) / perSecond;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      for (const key of keys) writes.push(library.writeStream(key, { i, sentAt: Date.now() }));
    }
    await Promise.all(writes);
    return count;
  }
}
library.Workflow({ name: 'StreamBench.emit' })(
  StreamBench.prototype,
  'emit',
  Object.getOwnPropertyDescriptor(StreamBench.prototype, 'emit'),
);
Injectable()(StreamBench);

/** Boots the module on `url`: a worker of the bench's queue, or (`worker: false`) a process that only reads. */
async function boot(url, { worker, applicationName }) {
  class StreamBenchModule {}
  Module({
    imports: [
      library.DedupQueueModule.forRoot({
        connection: { url, applicationName, poolSize: 10 },
        schema: SCHEMA,
        queues: [{ name: QUEUE, workerConcurrency: 200 }],
        worker,
        externalWorkflows: worker ? [] : ['StreamBench.emit'],
        inputLimits: { maxStreamValues: 1_000_000, maxStreamBytes: 256 * 1024 * 1024 },
      }),
    ],
    providers: worker ? [StreamBench] : [],
  })(StreamBenchModule);
  const app = await NestFactory.createApplicationContext(StreamBenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(library.QueueService) };
}

module.exports = { boot, QUEUE, SCHEMA };
