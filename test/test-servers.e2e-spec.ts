import { existsSync } from 'node:fs';
import { Client, Pool } from 'pg';
import { processesUsing } from 'throwaway-postgres/internals';
import { startBlackhole } from './support/blackhole';
import { PgBouncer, startPgBouncer } from './support/pgbouncer';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';
import { PostgresStandby, startPostgresStandby } from './support/postgres-standby';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** The test-server harness itself: servers of a test's own that it restarts, disturbs, pools and fails over. */
describeWithTools(['postgres-15', 'pgbouncer'], 'test servers', () => {
  let primary: TestPostgresServer;
  let standby: PostgresStandby | undefined;
  let bouncer: PgBouncer | undefined;

  beforeAll(async () => {
    primary = await startPostgresServer();
  });

  afterAll(async () => {
    await bouncer?.stop();
    await standby?.dispose();
    await primary?.dispose();
  });

  it('restarts (immediate) on the same port, keeping committed data', async () => {
    await primary.query('CREATE TABLE kept (n int)');
    await primary.query('INSERT INTO kept VALUES (1)');
    await primary.restart('immediate');
    expect(await primary.query('SELECT n FROM kept')).toEqual([{ n: 1 }]);
    expect(primary.url).toBe(`postgres://postgres@127.0.0.1:${primary.port}/postgres`);
  });

  it('stops and starts: connections are refused while it is down', async () => {
    await primary.stop('fast');
    await expect(primary.query('SELECT 1')).rejects.toThrow(/ECONNREFUSED/);
    await primary.start();
    expect(await primary.query('SELECT 1 AS one')).toEqual([{ one: 1 }]);
  });

  it('terminateBackends kills the matching client connections only', async () => {
    const victim = new Client({ connectionString: primary.url, application_name: 'victim' });
    const bystander = new Client({ connectionString: primary.url, application_name: 'bystander' });
    const errors: Error[] = [];
    victim.on('error', (error) => errors.push(error));
    await Promise.all([victim.connect(), bystander.connect()]);
    try {
      expect(await primary.terminateBackends(`application_name = 'victim'`)).toBe(1);
      // The server's notice reaches the client as an 'error' event when idle, or as the next query's error.
      const failure = await victim.query('SELECT 1').then(
        () => new Error('the query succeeded'),
        (error: Error) => error,
      );
      expect([...errors, failure].map((error) => error.message).join()).toMatch(
        /terminating connection due to administrator command/,
      );
      expect((await bystander.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await Promise.all([victim.end().catch(() => undefined), bystander.end()]);
    }
  });

  it('PgBouncer forwards queries in transaction mode and follows a retarget', async () => {
    const other = await startPostgresServer();
    try {
      bouncer = await startPgBouncer({ serverPort: primary.port });
      const pool = new Pool({ connectionString: bouncer.url, max: 2 });
      pool.on('error', () => undefined);
      try {
        expect((await pool.query('SELECT current_setting($1) AS port', ['port'])).rows).toEqual([
          { port: String(primary.port) },
        ]);
        expect(await bouncer.admin('SHOW POOLS')).toContainEqual(expect.objectContaining({ pool_mode: 'transaction' }));
        await bouncer.retarget(other.port);
        expect(bouncer.serverPort).toBe(other.port);
        expect((await pool.query('SELECT current_setting($1) AS port', ['port'])).rows).toEqual([
          { port: String(other.port) },
        ]);
      } finally {
        await pool.end();
      }
      await bouncer.retarget(primary.port);
    } finally {
      await other.dispose();
    }
    expect(existsSync(other.dataDir)).toBe(false);
    expect(processesUsing(other.dataDir, ['postgres'])).toEqual([]);
  });

  it('a synchronous standby replicates and, promoted, accepts writes', async () => {
    standby = await startPostgresStandby(primary);
    await primary.query('CREATE TABLE replicated (n int)');
    await primary.query('INSERT INTO replicated VALUES (42)');
    const replayed = standby;
    await waitFor(async () => (await replayed.query('SELECT n FROM replicated')).length === 1, { what: 'the replay' });
    expect(await standby.query('SELECT n FROM replicated')).toEqual([{ n: 42 }]);
    expect(await standby.query('SELECT pg_is_in_recovery() AS recovery')).toEqual([{ recovery: true }]);
    await expect(standby.query('INSERT INTO replicated VALUES (43)')).rejects.toMatchObject({ code: '25006' });

    await primary.stop('immediate');
    await standby.promote();
    await standby.query('INSERT INTO replicated VALUES (43)');
    expect(await standby.query('SELECT n FROM replicated ORDER BY n')).toEqual([{ n: 42 }, { n: 43 }]);
    await primary.start();
  });

  it('a blackhole accepts connections and never answers', async () => {
    const blackhole = await startBlackhole();
    const client = new Client({ connectionString: blackhole.url, connectionTimeoutMillis: 300 });
    client.on('error', () => undefined);
    try {
      await expect(client.connect()).rejects.toThrow(/timeout/i);
      expect(blackhole.accepted).toBe(1);
    } finally {
      await blackhole.close();
    }
  });
});
