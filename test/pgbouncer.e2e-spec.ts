import { Logger } from '@nestjs/common';
import { Pool } from 'pg';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import {
  burst,
  completionOf,
  LoadProcessOptions,
  logLines,
  startLoadProcess,
  startOf,
  stopLoadProcesses,
} from './fixtures/load-harness';
import { StreamTasks, streamTablesSql } from './fixtures/stream-tasks';
import { uniqueSchema } from './support/database';
import { PgBouncer, startPgBouncer } from './support/pgbouncer';
import { startPostgresServer, TestPostgresServer } from './support/postgres-server';
import { startQueueApp } from './support/queue-app';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/**
 * The module behind a real PgBouncer 1.18 in transaction pooling (no prepared-statement support, no session state)
 * with `pooler: 'transaction'`: the seed path, the multi-process deduplication race and crash recovery work through
 * it; wake-ups come fast through a direct `listen` connection, and without one the boot self-test finds NOTIFY does
 * not arrive, and the module polls, saying so once.
 */
describeWithTools(['pgbouncer'], 'behind PgBouncer in transaction mode', () => {
  let server: TestPostgresServer;
  let bouncer: PgBouncer;
  let pool: Pool;

  beforeAll(async () => {
    server = await startPostgresServer();
    bouncer = await startPgBouncer({
      serverPort: server.port,
      poolMode: 'transaction',
      settings: { default_pool_size: '5' },
    });
    pool = new Pool({ connectionString: server.url, max: 2 });
    pool.on('error', () => undefined);
  });

  afterEach(() => killFixtures());

  afterAll(async () => {
    await killFixtures();
    await pool?.end();
    await bouncer?.stop();
    await server?.dispose();
  });

  /** Load-process options through PgBouncer with `pooler: 'transaction'` and a direct LISTEN connection. */
  const throughBouncer = (schema: string, moduleOptions: Record<string, unknown> = {}): LoadProcessOptions => ({
    schema,
    databaseUrl: bouncer.url,
    moduleOptions: { pooler: 'transaction', listen: { url: server.url }, ...moduleOptions },
  });

  const statusOf = async (schema: string, workflowId: string) =>
    (await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [workflowId])).rows[0]?.status;

  it('runs the seed path: enqueue, a duplicate rejected, the workflow runs, the key frees', async () => {
    const schema = uniqueSchema('bouncer_seed');
    const worker = await startLoadProcess('worker', 'seed-worker', {
      ...throughBouncer(schema),
      env: { WORK_MS: '1500' },
    });
    const app = await startLoadProcess('enqueuer', 'seed-app', throughBouncer(schema));

    const [first] = await burst(app, 1, 'seed-key', 1);
    expect(first).toMatchObject({ workflowId: 'seed-app-r1-0', outcome: 'created' });
    await startOf([worker], first.workflowId);
    const [duplicate] = await burst(app, 2, 'seed-key', 1);
    expect(duplicate).toMatchObject({ workflowId: 'seed-app-r2-0', outcome: 'deduplicated' });
    await completionOf(pool, schema, first.workflowId);
    const [again] = await burst(app, 3, 'seed-key', 1);
    expect(again).toMatchObject({ workflowId: 'seed-app-r3-0', outcome: 'created' });
    await completionOf(pool, schema, again.workflowId);
    expect(await statusOf(schema, duplicate.workflowId)).toBeUndefined();

    await stopLoadProcesses([app, worker]);
    const named = await server.query<{ count: string }>(`SELECT count(*) FROM pg_prepared_statements WHERE name <> ''`);
    expect(named).toEqual([{ count: '0' }]);
  });

  it('lets exactly one of 2 processes x 50 concurrent enqueues of one key create a workflow', async () => {
    const schema = uniqueSchema('bouncer_race');
    const options = throughBouncer(schema);
    const apps = await Promise.all(['race-a', 'race-b'].map((name) => startLoadProcess('enqueuer', name, options)));
    for (let round = 1; round <= 3; round++) {
      const results = (await Promise.all(apps.map((app) => burst(app, round, `race-key-${round}`, 50)))).flat();
      expect(results.filter((result) => result.outcome === 'failed')).toEqual([]);
      expect(results.filter((result) => result.outcome === 'created')).toHaveLength(1);
      expect(results.filter((result) => result.outcome === 'deduplicated')).toHaveLength(99);
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE deduplication_id = $1`,
        [`race-key-${round}`],
      );
      expect(rows).toEqual([{ n: 1 }]);
    }
    await stopLoadProcesses(apps);
  });

  it('recovers the workflow of a SIGKILLed worker in a live peer within 10 s at default lease settings', async () => {
    const schema = uniqueSchema('bouncer_crash');
    const doomed = await startLoadProcess('worker', 'crash-doomed', {
      ...throughBouncer(schema),
      env: { HOLD_WORKFLOWS: '1' },
    });
    const app = await startLoadProcess('enqueuer', 'crash-app', throughBouncer(schema));
    const [enqueued] = await burst(app, 1, 'crash-key', 1);
    await startOf([doomed], enqueued.workflowId);
    const peer = await startLoadProcess('worker', 'crash-peer', throughBouncer(schema));

    doomed.child.kill('SIGKILL');
    expect(await doomed.ended).toEqual({ code: null, signal: 'SIGKILL' });
    const killedAt = Date.now();
    const doneAt = await completionOf(pool, schema, enqueued.workflowId, 60_000);
    console.log(`[pgbouncer] recovery after SIGKILL at default lease settings: ${doneAt - killedAt} ms`);
    expect(doneAt - killedAt).toBeLessThan(10_000);
    expect(await statusOf(schema, enqueued.workflowId)).toBe('SUCCESS');
    await stopLoadProcesses([app, peer]);
  });

  /** Enqueues probe workflows one at a time; resolves with how long each took to start. */
  async function wakeUpLatencies(app: FixtureProcess, worker: FixtureProcess, probes: number): Promise<number[]> {
    const latencies: number[] = [];
    for (let round = 1; round <= probes; round++) {
      const [probe] = await burst(app, round, `probe-${round}`, 1);
      expect(probe).toMatchObject({ outcome: 'created' });
      latencies.push((await startOf([worker], probe.workflowId)) - probe.calledAt);
    }
    return latencies;
  }

  it('wakes workers at once through the direct listen connection (pollIntervalMs 10 s)', async () => {
    const schema = uniqueSchema('bouncer_listen');
    const options = throughBouncer(schema, { pollIntervalMs: 10_000 });
    const worker = await startLoadProcess('worker', 'listen-worker', options);
    const app = await startLoadProcess('enqueuer', 'listen-app', options);
    const latencies = await wakeUpLatencies(app, worker, 5);
    console.log(`[pgbouncer] wake-up latencies with listen: ${latencies.join(', ')} ms`);
    expect(Math.max(...latencies)).toBeLessThan(2000);
    await stopLoadProcesses([app, worker]);
  });

  it('reads a stream by polling once the self-test finds a LISTEN through the pooler hears nothing, its reader waiting since before', async () => {
    const schema = uniqueSchema('bouncer_stream');
    const warned = jest.spyOn(Logger.prototype, 'warn');
    const writer = await startQueueApp({ schema, connection: { url: server.url }, queues: [{ name: 'streams' }] }, [
      StreamTasks,
    ]);
    const reader = await startQueueApp({
      schema,
      connection: { url: server.url },
      listen: { url: bouncer.url },
      queues: [{ name: 'streams' }],
      worker: false,
      pollIntervalMs: 300,
    });
    try {
      await pool.query(streamTablesSql(schema));
      const tasks = writer.get(StreamTasks);
      tasks.useSchema(schema, server.url);
      const handle = await writer.queues.enqueue('streams', tasks.tokens, [['a', 'b'], 'g', 0]);
      const reading = (async () => {
        const values: unknown[] = [];
        for await (const { value } of reader.queues.readStream(handle.workflowId, 'tokens')) values.push(value);
        return values;
      })();
      await waitFor(() => warned.mock.calls.some(([message]) => /LISTEN\/NOTIFY are off/.test(String(message))), {
        what: 'the self-test to give up on notifications',
      });
      await pool.query(`INSERT INTO "${schema}".release (key) VALUES ('g')`);
      await expect(reading).resolves.toEqual(['a', 'b']);
    } finally {
      warned.mockRestore();
      await reader.close();
      await writer.close();
    }
  });

  it('without a listen connection, finds at boot that NOTIFY does not arrive, polls, and warns once', async () => {
    const schema = uniqueSchema('bouncer_poll');
    const options = throughBouncer(schema, { listen: undefined, pollIntervalMs: 1000 });
    const worker = await startLoadProcess('worker', 'poll-worker', options);
    const app = await startLoadProcess('enqueuer', 'poll-app', options);
    const latencies = await wakeUpLatencies(app, worker, 3);
    expect(Math.max(...latencies)).toBeLessThan(1000 + 1500);
    const warnings = logLines(worker).filter((line) => line.level === 'warn' && /poll/i.test(line.message));
    expect(warnings).toHaveLength(1);
    expect(warnings[0].message).toMatch(/NOTIFY|LISTEN/);
    await stopLoadProcesses([app, worker]);
  });
});
