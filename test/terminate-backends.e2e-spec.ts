import {
  acknowledgedCount,
  countLogLines,
  enqueueResults,
  expectEveryAcknowledgedEnqueueSucceededOnce,
  startSteadyLoad,
  stopLoadProcesses,
  useOwnServer,
  waitForAcknowledged,
} from './fixtures/load-harness';
import { uniqueSchema } from './support/database';

/**
 * A `pg_terminate_backend` storm: every 200 ms for 5 s, every client backend of an app process (enqueuing every
 * 40 ms) and of a worker process is terminated. Both live on, every acknowledged enqueue ends SUCCESS exactly once,
 * failed calls fail with DatabaseUnavailableError only, the workers resume by themselves, and the logs stay quiet.
 */
describe('a pg_terminate_backend storm under load', () => {
  const schema = uniqueSchema('storm');
  const own = useOwnServer();

  it('keeps both processes alive and loses or doubles no acknowledged workflow', async () => {
    const server = own.server();
    const options = { schema, databaseUrl: server.url };
    const { enqueuer, worker, children } = await startSteadyLoad('storm', options);

    let terminated = 0;
    for (const stormEnd = Date.now() + 5000; Date.now() < stormEnd;) {
      terminated += await server.terminateBackends(`application_name IN ('storm-app', 'storm-worker')`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const stormEndedAt = Date.now();
    await waitForAcknowledged(
      children,
      enqueuer,
      acknowledgedCount(enqueuer) + 25,
      'the app to enqueue again after the storm',
    );
    const resumedMs = Date.now() - stormEndedAt;

    await stopLoadProcesses([enqueuer]);
    const counts = await expectEveryAcknowledgedEnqueueSucceededOnce(own.pool(), schema, enqueueResults(enqueuer));
    await stopLoadProcesses([worker]);
    console.log(`[terminate-backends] ${JSON.stringify({ ...counts, terminated, resumedMs })}`);
    expect(terminated).toBeGreaterThan(10);

    for (const child of children) {
      const unreachable = countLogLines(child, 'is unreachable');
      const back = countLogLines(child, 'reachable again after');
      expect({ name: child.name, unreachable: unreachable <= 1, balanced: unreachable === back }).toEqual({
        name: child.name,
        unreachable: true,
        balanced: true,
      });
      const errorsWithStacks = child.messages.filter(
        (message) =>
          message.type === 'log' && (message.details as string[]).some((detail) => detail.includes('\n    at ')),
      );
      expect({ name: child.name, errorsWithStacks: errorsWithStacks.length }).toEqual({
        name: child.name,
        errorsWithStacks: 0,
      });
    }
  });
});
