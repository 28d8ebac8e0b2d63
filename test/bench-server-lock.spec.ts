import path from 'node:path';
import { databaseUrl } from './support/database';
import { waitFor } from './support/wait-for';

interface ServerHold {
  release(): Promise<void>;
}
// eslint-disable-next-line @typescript-eslint/no-require-imports -- the bench is plain JavaScript, outside the build
const { holdServer } = require(path.resolve(__dirname, '../bench/lib/pg.js')) as {
  holdServer(adminUrl: string, log: (message: string) => void): Promise<ServerHold>;
};

/**
 * Two bench runs on one server recreated each other's bench_* databases mid-measurement (a W3 run then lost the jobs
 * enqueued before the other run's DROP DATABASE and timed out with "no latencies"): a run now holds the server, and
 * a second one waits until the first has ended.
 */
describe('bench runs on one server', () => {
  it('run one after another: the second waits, saying so, until the first releases the server', async () => {
    const first = await holdServer(databaseUrl(), () => undefined);
    const said: string[] = [];
    let secondHeld = false;
    const second = holdServer(databaseUrl(), (message) => said.push(message)).then((hold) => {
      secondHeld = true;
      return hold;
    });
    await waitFor(() => said.length > 0, { what: 'the second run to say it waits' });
    expect(said).toEqual([
      expect.stringMatching(/^another bench run uses this server \(backend \d+ since .+\); waiting/),
    ]);
    expect(secondHeld).toBe(false);
    await first.release();
    const hold = await second;
    expect(secondHeld).toBe(true);
    expect(said).toHaveLength(1);
    await hold.release();
  }, 30_000);
});
