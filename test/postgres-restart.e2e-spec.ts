import { FixtureProcess } from './fixtures/child-harness';
import {
  acknowledgedCount,
  countLogLines,
  enqueueResults,
  expectEveryAcknowledgedEnqueueSucceededOnce,
  startSteadyLoad,
  stopLoadProcesses,
  useOwnServer,
  waitForAcknowledged,
  waitWhileAlive,
} from './fixtures/load-harness';
import { uniqueSchema } from './support/database';

/**
 * A PostgreSQL server of the test's own restarted (`pg_ctl stop -m immediate`, then start) twice while an app
 * process enqueues every 40 ms and a worker process drains: both live on, every acknowledged enqueue ends SUCCESS
 * exactly once, failed calls fail with DatabaseUnavailableError only, the workers resume by themselves, and each
 * process logs one "unreachable" and one "reachable again" line per outage.
 */
describe('a PostgreSQL restart under load', () => {
  const schema = uniqueSchema('restart');
  const own = useOwnServer();

  /** The completion time of the first workflow that completed at or after `since` (ms since the epoch). */
  const firstCompletionSince = (children: FixtureProcess[], since: number) =>
    waitWhileAlive(
      children,
      async () => {
        const { rows } = await own.pool().query(
          `SELECT min(completed_at) AS first FROM "${schema}".workflows
           WHERE status = 'SUCCESS' AND completed_at >= to_timestamp($1::double precision / 1000)`,
          [since],
        );
        return rows[0].first ? (rows[0].first as Date).getTime() : undefined;
      },
      { timeoutMs: 30_000, what: 'a workflow to complete after the restart' },
    );

  it('keeps both processes alive and loses or doubles no acknowledged workflow across two immediate restarts', async () => {
    const server = own.server();
    const options = { schema, databaseUrl: server.url };
    const { enqueuer, worker, children } = await startSteadyLoad('restart', options);

    const measured: Array<{ restartMs: number; fromRestartMs: number; fromUpMs: number }> = [];
    for (let outage = 1; outage <= 2; outage++) {
      const before = acknowledgedCount(enqueuer);
      await waitForAcknowledged(children, enqueuer, before + 25, `enqueues to be acknowledged before restart ${outage}`);
      await firstCompletionSince(children, Date.now());
      const restartAt = Date.now();
      await server.restart('immediate');
      const upAt = Date.now();
      const firstDone = await firstCompletionSince(children, upAt);
      measured.push({ restartMs: upAt - restartAt, fromRestartMs: firstDone - restartAt, fromUpMs: firstDone - upAt });
      const afterUp = acknowledgedCount(enqueuer);
      await waitForAcknowledged(children, enqueuer, afterUp + 1, `the app to enqueue again after restart ${outage}`);
    }

    await stopLoadProcesses([enqueuer]);
    const counts = await expectEveryAcknowledgedEnqueueSucceededOnce(own.pool(), schema, enqueueResults(enqueuer));
    await stopLoadProcesses([worker]);
    // eslint-disable-next-line no-console
    console.log(`[postgres-restart] ${JSON.stringify({ ...counts, measured })}`);

    for (const child of children) {
      expect({ name: child.name, unreachable: countLogLines(child, 'is unreachable') }).toEqual({ name: child.name, unreachable: 2 });
      expect({ name: child.name, back: countLogLines(child, 'reachable again after') }).toEqual({ name: child.name, back: 2 });
    }
  });
});
