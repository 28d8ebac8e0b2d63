'use strict';
/*
 * One application process of the soak (bench/soak.js): DedupQueueModule at its defaults on SOAK_DATABASE_URL,
 * enqueueing SOAK_RATE workflows per second (a quarter of them with a deduplication ID from a small set) and
 * draining the queue. Reports over IPC: every accepted enqueue, every refusal by error name, every run of a body,
 * its RSS every 10 s, and any uncaught exception. Stops enqueueing on { type: 'stop-enqueueing' } and exits on
 * { type: 'exit' } after a graceful close.
 */
const path = require('node:path');
const { LIBRARY_DIST } = require('./lib/config');

const from = (id) => require(require.resolve(id, { paths: [LIBRARY_DIST] }));
from('reflect-metadata');
const { Injectable, Module } = from('@nestjs/common');
const { NestFactory } = from('@nestjs/core');
const { DedupQueueModule, QueueService, Workflow } = require(path.resolve(LIBRARY_DIST));

const name = process.env.SOAK_NAME;
const rate = Number(process.env.SOAK_RATE || 20);
const send = (message) => process.connected && process.send(message);

process.on('uncaughtException', (error) => send({ type: 'uncaught', error: String(error && error.stack) }));
process.on('unhandledRejection', (error) => send({ type: 'uncaught', error: String(error && error.stack) }));

class SoakTasks {
  async run(id) {
    send({ type: 'ran', id, at: Date.now() });
    await new Promise((resolve) => setTimeout(resolve, 5));
    return id;
  }
}
Injectable()(SoakTasks);
Workflow()(SoakTasks.prototype, 'run', Object.getOwnPropertyDescriptor(SoakTasks.prototype, 'run'));

class SoakModule {}
Module({
  imports: [
    DedupQueueModule.forRoot({
      connection: { url: process.env.SOAK_DATABASE_URL },
      queues: [{ name: 'soak', workerConcurrency: 16 }],
      executorId: `soak-${name}`,
    }),
  ],
  providers: [SoakTasks],
})(SoakModule);

async function main() {
  const app = await NestFactory.createApplicationContext(SoakModule, { logger: ['error', 'warn', 'log'] });
  const queues = app.get(QueueService);
  let n = 0;
  let enqueueing = true;
  const enqueueOne = () => {
    const id = `${name}-${n++}`;
    const options = { workflowId: id, ...(n % 4 === 0 ? { deduplicationId: `key-${n % 50}` } : {}) };
    queues.enqueue('soak', 'SoakTasks.run', [id], options).then(
      (handle) => send({ type: 'accepted', id: handle.workflowId, created: handle.created }),
      (error) => send({ type: 'refused', id, error: error.name }),
    );
  };
  const timer = setInterval(() => enqueueing && enqueueOne(), 1000 / rate);
  const rss = setInterval(() => send({ type: 'rss', rss: process.memoryUsage().rss, at: Date.now() }), 10_000);
  process.on('message', async (message) => {
    if (message.type === 'stop-enqueueing') enqueueing = false;
    if (message.type === 'exit') {
      clearInterval(timer);
      clearInterval(rss);
      await app.close();
      send({ type: 'closed' });
      process.exit(0);
    }
  });
  send({ type: 'ready' });
}

main().catch((error) => {
  send({ type: 'failed', error: String(error && error.stack) });
  process.exit(1);
});
