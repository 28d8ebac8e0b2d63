import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { LOAD_QUEUE } from './fixtures/child-load-support';
import { startLoadProcess, stopLoadProcesses } from './fixtures/load-harness';
import { uniqueSchema } from './support/database';
import { Blackhole, startBlackhole } from './support/blackhole';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';

/**
 * Boot against a database that does not answer: a listener that accepts TCP and never replies (a firewall drop, a
 * hung proxy) must not leave the app at "Starting Nest application..." forever. The boot fails after the connect
 * timeout (the module's `connectTimeoutMs`, or `connect_timeout` in the URL) with an error that names the module,
 * host, port and database and never the password; with `retryAttempts`, a database that comes up in time is used.
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

  it('fails after connectTimeoutMs with an error naming the module, host, port and database, not the password', async () => {
    const url = `postgres://app_user:s3cret-pw@127.0.0.1:${blackhole.port}/app_db`;
    const { error, elapsedMs, exit } = await failedBoot(url, { connectTimeoutMs: 1000, retryAttempts: 0 });
    expect(exit).toEqual({ code: 1, signal: null });
    expect(elapsedMs).toBeLessThan(8000);
    expect(error).toMatch(/DedupQueue/);
    expect(error).toContain('127.0.0.1');
    expect(error).toContain(String(blackhole.port));
    expect(error).toContain('app_db');
    expect(error).not.toContain('s3cret-pw');
    expect(blackhole.accepted).toBeGreaterThan(0);
  });

  it('honours connect_timeout in the URL', async () => {
    const url = `postgres://postgres@127.0.0.1:${blackhole.port}/postgres?connect_timeout=1`;
    const { error, elapsedMs } = await failedBoot(url, { retryAttempts: 0 });
    expect(elapsedMs).toBeLessThan(8000);
    expect(error).toContain(String(blackhole.port));
  });

  it('fails within the default connect timeout (10 s) when none is given', async () => {
    const { elapsedMs } = await failedBoot(blackhole.url, { retryAttempts: 0 });
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
