'use strict';
// A Nest app (Express) with DedupQueueModule and the dashboard on the bench schema, listening on a free port.
require('reflect-metadata');
const { Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { DedupQueueDashboardModule, DedupQueueModule } = require('../../packages/nest-dedup-queue/dist');
const { QUEUES } = require('./seed');

async function startDashboardApp(url, schema) {
  class BenchDashboardApp {}
  Module({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url },
        schema,
        worker: false,
        queues: QUEUES.map(({ workflow: _w, ...q }) => q),
      }),
      DedupQueueDashboardModule.forRoot({ path: '/queues' }),
    ],
  })(BenchDashboardApp);
  const app = await NestFactory.create(BenchDashboardApp, { logger: ['error', 'warn'] });
  await app.listen(0, '127.0.0.1');
  return { app, baseUrl: `http://127.0.0.1:${app.getHttpServer().address().port}/queues` };
}

module.exports = { startDashboardApp };
