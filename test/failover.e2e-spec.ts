import { Pool } from 'pg';
import { killFixtures } from './fixtures/child-harness';
import {
  acknowledgedCount,
  burst,
  enqueueResults,
  expectEveryAcknowledgedEnqueueSucceededOnce,
  startLoadProcess,
  startOf,
  startSteadyLoad,
  stopLoadProcesses,
  waitForAcknowledged,
  waitWhileAlive,
} from './fixtures/load-harness';
import { uniqueSchema } from './support/database';
import { PgBouncer, startPgBouncer } from './support/pgbouncer';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';
import { PostgresStandby, startPostgresStandby } from './support/postgres-standby';
import { describeWithTools } from './support/system-tools';

/**
 * Failover behind one stable endpoint: a primary with a synchronous streaming standby, the app and a worker connected
 * (pool and LISTEN) through a session-mode PgBouncer. Under load the primary stops (immediate), the endpoint is moved
 * to the standby while it is still read-only, then the standby is promoted. Read-only statements fail with
 * DatabaseUnavailableError (never a raw 25006), the processes follow the new primary, workers resume, wake-ups work
 * there again (pollIntervalMs is 10 s, so a fast start proves LISTEN is back), and no acknowledged enqueue is lost.
 */
describeWithTools(['postgres-15', 'pgbouncer'], 'failover to a promoted standby', () => {
  const schema = uniqueSchema('failover');
  let primary: TestPostgresServer;
  let standby: PostgresStandby;
  let bouncer: PgBouncer;

  beforeAll(async () => {
    primary = await startPostgresServer();
    standby = await startPostgresStandby(primary, { synchronous: true });
    bouncer = await startPgBouncer({ serverPort: primary.port, poolMode: 'session' });
  });

  afterAll(async () => {
    await killFixtures();
    await bouncer?.stop();
    await standby?.dispose();
    await primary?.dispose();
  });

  it('follows the new primary with no acknowledged enqueue lost and wake-ups working again', async () => {
    const options = { schema, databaseUrl: bouncer.url, moduleOptions: { pollIntervalMs: 10_000 } };
    const { enqueuer, worker, children } = await startSteadyLoad('failover', options, 50);

    await primary.stop('immediate');
    const failedAt = Date.now();
    await bouncer.retarget(standby.port);
    const readOnlyFailures = () =>
      enqueueResults(enqueuer).filter((result) => result.outcome === 'failed' && result.at > failedAt + 1000);
    await waitWhileAlive(children, () => readOnlyFailures().length >= 5, {
      timeoutMs: 30_000,
      what: 'enqueues to fail while the endpoint points at the read-only standby',
    });
    expect(
      readOnlyFailures()
        .filter((result) => result.errorName !== 'DatabaseUnavailableError')
        .slice(0, 3),
    ).toEqual([]);

    await standby.promote();
    const promotedAt = Date.now();
    await waitForAcknowledged(
      children,
      enqueuer,
      acknowledgedCount(enqueuer) + 25,
      'the app to enqueue on the new primary',
    );
    const resumedMs = Date.now() - promotedAt;
    await stopLoadProcesses([enqueuer]);

    const pool = new Pool({ connectionString: standby.url, max: 2 });
    pool.on('error', () => undefined);
    try {
      const counts = await expectEveryAcknowledgedEnqueueSucceededOnce(pool, schema, enqueueResults(enqueuer));
      const prober = await startLoadProcess('enqueuer', 'failover-probe', options);
      const latencies: number[] = [];
      for (let round = 1; round <= 3; round++) {
        const [probe] = await burst(prober, round, `probe-${round}`, 1);
        expect(probe).toMatchObject({ outcome: 'created' });
        latencies.push((await startOf([worker], probe.workflowId)) - probe.calledAt);
      }
      const figures = { ...counts, readOnlyFailures: readOnlyFailures().length, resumedMs, latencies };
      console.log(`[failover] ${JSON.stringify(figures)}`);
      expect(Math.max(...latencies)).toBeLessThan(2000);
      await stopLoadProcesses([prober, worker]);
    } finally {
      await pool.end();
    }
  });
});
