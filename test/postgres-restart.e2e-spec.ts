import { FixtureProcess } from './fixtures/child-harness';
import {
  acknowledgedCount,
  countLogLines,
  enqueueResults,
  expectEveryAcknowledgedEnqueueSucceededOnce,
  logLines,
  startSteadyLoad,
  stopLoadProcesses,
  useOwnServer,
  waitForAcknowledged,
  waitWhileAlive,
} from './fixtures/load-harness';
import { uniqueSchema } from './support/database';

/**
 * A PostgreSQL server of the test's own restarted twice (`pg_ctl stop -m immediate`, down for 5 s, then started
 * again) while an app process enqueues every 40 ms and a worker process drains: both live on, every acknowledged
 * enqueue ends SUCCESS exactly once, failed calls fail with DatabaseUnavailableError only, the workers resume by
 * themselves, and each process logs one "unreachable" and one "reachable again after <s> s" line per outage (the
 * outage lasts 5 s so that the second, within 30 s of the first, is one the module logs too).
 */
describe('a PostgreSQL restart under load', () => {
  const schema = uniqueSchema('restart');
  /** How long the server stays down in each restart. */
  const OUTAGE_MS = 5000;
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

    const measured: Array<{ downMs: number; fromStopMs: number; fromUpMs: number }> = [];
    for (let outage = 1; outage <= 2; outage++) {
      const before = acknowledgedCount(enqueuer);
      await waitForAcknowledged(
        children,
        enqueuer,
        before + 25,
        `enqueues to be acknowledged before restart ${outage}`,
      );
      await firstCompletionSince(children, Date.now());
      const stoppedAt = Date.now();
      await server.stop('immediate');
      await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));
      await server.start();
      const upAt = Date.now();
      const firstDone = await firstCompletionSince(children, upAt);
      measured.push({ downMs: upAt - stoppedAt, fromStopMs: firstDone - stoppedAt, fromUpMs: firstDone - upAt });
      const afterUp = acknowledgedCount(enqueuer);
      await waitForAcknowledged(children, enqueuer, afterUp + 1, `the app to enqueue again after restart ${outage}`);
    }

    await stopLoadProcesses([enqueuer]);
    const counts = await expectEveryAcknowledgedEnqueueSucceededOnce(own.pool(), schema, enqueueResults(enqueuer));
    await stopLoadProcesses([worker]);
    console.log(`[postgres-restart] ${JSON.stringify({ ...counts, measured })}`);

    for (const child of children) {
      const unreachable = countLogLines(child, 'is unreachable');
      const back = logLines(child).filter((line) => line.message.includes('reachable again after'));
      expect({ name: child.name, unreachable, back: back.length }).toEqual({
        name: child.name,
        unreachable: 2,
        back: 2,
      });
      for (const line of back) {
        expect(Number(/after ([\d.]+) s/.exec(line.message)?.[1])).toBeGreaterThanOrEqual(OUTAGE_MS / 1000 - 1);
      }
    }
  });
});
