import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { LOAD_QUEUE } from './fixtures/child-load-support';
import { startLoadProcess, stopLoadProcesses } from './fixtures/load-harness';
import { uniqueSchema } from './support/database';
import { Blackhole, startBlackhole } from './support/blackhole';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';

/**
 * Boot of a real process (child-load-worker.ts) against a database that does not answer: a listener that accepts TCP
 * and never replies (a firewall drop, a hung proxy) fails the boot within the default connect timeout (10 s) instead
 * of leaving it at "Starting Nest application..." forever; with `retryAttempts`, a database that comes up in time is
 * used. (database-outage.e2e-spec.ts covers `connectTimeoutMs`, the URL's `connect_timeout` and the error text.)
 */
describe('boot against an unreachable database', () => {
  const schema = uniqueSchema('boot_unreachable');
  let blackhole: Blackhole;
  let server: TestPostgresServer | undefined;

  beforeAll(async () => {
    blackhole = await startBlackhole();
  });

  afterAll(async () => {
    await killFixtures();
    await blackhole?.close();
    await server?.dispose();
  });

  /** Boots a worker process and resolves with its boot error and how long the boot took to fail. */
  async function failedBoot(databaseUrl: string, moduleOptions: Record<string, unknown>) {
    const startedAt = Date.now();
    const child = spawnFixture('child-load-worker.ts', 'boot', {
      DATABASE_URL: databaseUrl,
      SCHEMA: schema,
      MODULE_OPTIONS: JSON.stringify(moduleOptions),
    });
    const failed = await child.message('failed', {}, 30_000);
    const exit = await child.waitForExit();
    return { error: String(failed.error), elapsedMs: Date.now() - startedAt, exit };
  }

  it('fails within the default connect timeout (10 s) when none is given, naming the endpoint', async () => {
    const { elapsedMs, error, exit } = await failedBoot(blackhole.url, { retryAttempts: 0 });
    expect(exit).toEqual({ code: 1, signal: null });
    expect(error).toContain(`127.0.0.1:${blackhole.port}`);
    expect(blackhole.accepted).toBeGreaterThan(0);
    expect(elapsedMs).toBeGreaterThan(9000);
    expect(elapsedMs).toBeLessThan(25_000);
  });

  it('with retryAttempts, boots once a database that was down comes up', async () => {
    server = await startPostgresServer();
    await server.stop('fast');
    const booting = startLoadProcess('worker', 'boot-retry', {
      schema,
      databaseUrl: server.url,
      moduleOptions: { retryAttempts: 10, retryDelay: 500, queues: [{ name: LOAD_QUEUE }] },
    });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await server.start();
    const worker = await booting;
    await stopLoadProcesses([worker]);
  });
});
