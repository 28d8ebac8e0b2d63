import { Pool } from 'pg';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import {
  countLogLines,
  enqueueResults,
  expectEveryAcknowledgedEnqueueSucceededOnce,
  startLoadProcess,
  stopLoadProcesses,
  waitWhileAlive,
} from './fixtures/load-harness';
import { uniqueSchema } from './support/database';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';

/**
 * A PostgreSQL server of the test's own restarted (`pg_ctl stop -m immediate`, then start) twice while an app
 * process enqueues every 40 ms and a worker process drains: both live on, every acknowledged enqueue ends SUCCESS
 * exactly once, failed calls fail with DatabaseUnavailableError only, the workers resume by themselves, and each
 * process logs one "unreachable" and one "reachable again" line per outage.
 */
describe('a PostgreSQL restart under load', () => {
  const schema = uniqueSchema('restart');
  let server: TestPostgresServer;
  let pool: Pool;

  beforeAll(async () => {
    server = await startPostgresServer();
    pool = new Pool({ connectionString: server.url, max: 2 });
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await killFixtures();
    await pool?.end();
    await server?.dispose();
  });

  /** The completion time of the first workflow that completed at or after `since` (ms since the epoch). */
  const firstCompletionSince = (children: FixtureProcess[], since: number) =>
    waitWhileAlive(
      children,
      async () => {
        const { rows } = await pool.query(
          `SELECT min(completed_at) AS first FROM "${schema}".workflows
           WHERE status = 'SUCCESS' AND completed_at >= to_timestamp($1::double precision / 1000)`,
          [since],
        );
        return rows[0].first ? (rows[0].first as Date).getTime() : undefined;
      },
      { timeoutMs: 30_000, what: 'a workflow to complete after the restart' },
    );

  const acknowledgedCount = (results: ReturnType<typeof enqueueResults>) =>
    results.filter((result) => result.outcome === 'created').length;

  it('keeps both processes alive and loses or doubles no acknowledged workflow across two immediate restarts', async () => {
    const options = { schema, databaseUrl: server.url };
    const worker = await startLoadProcess('worker', 'restart-worker', options);
    const enqueuer = await startLoadProcess('enqueuer', 'restart-app', options);
    const children = [enqueuer, worker];
    enqueuer.send({ type: 'load', intervalMs: 40, prefix: 'restart' });

    const measured: Array<{ restartMs: number; fromRestartMs: number; fromUpMs: number }> = [];
    for (let outage = 1; outage <= 2; outage++) {
      const before = acknowledgedCount(enqueueResults(enqueuer));
      await waitWhileAlive(children, () => acknowledgedCount(enqueueResults(enqueuer)) >= before + 25, {
        timeoutMs: 30_000,
        what: `enqueues to be acknowledged before restart ${outage}`,
      });
      await firstCompletionSince(children, Date.now());
      const restartAt = Date.now();
      await server.restart('immediate');
      const upAt = Date.now();
      const firstDone = await firstCompletionSince(children, upAt);
      measured.push({ restartMs: upAt - restartAt, fromRestartMs: firstDone - restartAt, fromUpMs: firstDone - upAt });
      const afterUp = acknowledgedCount(enqueueResults(enqueuer));
      await waitWhileAlive(children, () => acknowledgedCount(enqueueResults(enqueuer)) > afterUp, {
        timeoutMs: 30_000,
        what: `the app to enqueue again after restart ${outage}`,
      });
    }

    await stopLoadProcesses([enqueuer]);
    const counts = await expectEveryAcknowledgedEnqueueSucceededOnce(pool, schema, enqueueResults(enqueuer));
    await stopLoadProcesses([worker]);
    // eslint-disable-next-line no-console
    console.log(`[postgres-restart] ${JSON.stringify({ ...counts, measured })}`);

    for (const child of children) {
      expect({ name: child.name, unreachable: countLogLines(child, 'is unreachable') }).toEqual({ name: child.name, unreachable: 2 });
      expect({ name: child.name, back: countLogLines(child, 'reachable again after') }).toEqual({ name: child.name, back: 2 });
    }
  });
});
