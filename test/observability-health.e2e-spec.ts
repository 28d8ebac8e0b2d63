import { Controller, Get, INestApplication, Injectable, Module } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import { DedupQueueHealthIndicator, DedupQueueModule, QueueService, Workflow } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { Registry } from 'prom-client';
import request from 'supertest';
import { databaseUrl, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

@Injectable()
class HealthTasks {
  @Workflow()
  async echo(value: string): Promise<string> {
    return value;
  }
}

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly queue: DedupQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.queue.isHealthy('queue', { timeoutMs: 1000 })]);
  }
}

/**
 * The database "goes away" without touching the shared server's configuration: this file's own database refuses
 * new connections (ALLOW_CONNECTIONS false) and its sessions are terminated; then it accepts them again.
 */
describe('health and metrics while the database goes away and comes back', () => {
  const database = uniqueSchema('health');
  const registry = new Registry();
  let admin: Pool;
  let app: INestApplication;

  const setConnections = async (allowed: boolean) => {
    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS ${allowed}`);
    if (!allowed) {
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, [database]);
    }
  };
  const health = () => request(app.getHttpServer()).get('/health');

  beforeAll(async () => {
    admin = testPool();
    await admin.query(`CREATE DATABASE "${database}"`);
    const url = new URL(databaseUrl());
    url.pathname = `/${database}`;
    @Module({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: url.toString() },
          queues: [{ name: 'health' }],
          leaseMs: 1500,
          heartbeatIntervalMs: 200,
          metrics: { registry, scrapeTimeoutMs: 1000, finishedCountsMaxAgeMs: 0 },
        }),
        TerminusModule,
      ],
      controllers: [HealthController],
      providers: [HealthTasks],
    })
    class HealthAppModule {}
    const module = await Test.createTestingModule({ imports: [HealthAppModule] }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await setConnections(true);
    await app?.close();
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
  });

  it('is up, goes down with the failing checks and since when, and comes back up', async () => {
    const up = await health().expect(200);
    expect(up.body.info.queue).toMatchObject({
      status: 'up',
      database: { status: 'up' },
      lease: { status: 'up' },
      workers: { status: 'up', queues: ['health'] },
    });

    const wentAway = Date.now();
    await setConnections(false);
    const down = await health().expect(503);
    expect(down.body.status).toBe('error');
    expect(down.body.error.queue).toMatchObject({
      status: 'down',
      failed: expect.arrayContaining(['database']),
      database: { status: 'down', error: expect.any(String), since: expect.any(String) },
    });
    const since = Date.parse(down.body.error.queue.database.since);
    expect(since).toBeGreaterThanOrEqual(wentAway - 1000);
    // Past leaseMs without a heartbeat, the lease is reported too; the database has been failing since the start.
    const both = await waitFor(
      async () => {
        const { body } = await health().expect(503);
        return body.error.queue.lease?.status === 'down' && body.error.queue;
      },
      { what: 'the lease to be reported stale', timeoutMs: 15_000 },
    );
    expect(both.failed).toEqual(['database', 'lease']);
    expect(Date.parse(both.database.since)).toBe(since);

    const scrapeStarted = Date.now();
    const scraped = await registry.metrics();
    expect(Date.now() - scrapeStarted).toBeLessThan(3000);
    expect(scraped).not.toMatch(/^dedup_queue_workflows\{/m);
    expect(scraped).toMatch(/^dedup_queue_enqueued_total\{queue="health"\} 0$/m);

    await setConnections(true);
    const back = await waitFor(
      async () => {
        const response = await health();
        return response.status === 200 && response.body.info.queue;
      },
      { what: 'health to be up again', timeoutMs: 20_000 },
    );
    expect(back).toMatchObject({ status: 'up', database: { status: 'up' }, lease: { status: 'up' } });
    const handle = await app.get(QueueService).enqueue('health', 'HealthTasks.echo', ['after']);
    await expect(handle.getResult()).resolves.toBe('after');
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/^dedup_queue_workflows\{queue="health",status="SUCCESS"\} 1$/m);
  });
});
