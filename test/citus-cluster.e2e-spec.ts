import { existsSync } from 'node:fs';
import { Client, DatabaseError, escapeLiteral, type Pool } from 'pg';
import { CitusCluster, startCitusCluster } from './support/citus-cluster';
import { testPool } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/**
 * The Citus harness, and the Citus behaviours the distributed storage will rely on (docs/citus-notes.md): which
 * statement shapes run on one node, which fan out or are refused, where NOTIFY fires, what a dedup race and a
 * stopped worker look like from the coordinator. Tables here mimic the storage's: distributed by `queue_name`.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus cluster', () => {
  const SHARDS = 4;
  let cluster: CitusCluster;
  let pool: Pool;
  /** Two queues whose shards are on different workers: `queueOn[i]` lives on `cluster.workers[i]`. */
  let queueOn: [string, string];

  beforeAll(async () => {
    cluster = await startCitusCluster();
    pool = testPool(cluster.url);
    await pool.query(`
      CREATE TABLE workflows (
        queue_name text NOT NULL,
        workflow_id text NOT NULL,
        deduplication_id text,
        status text NOT NULL DEFAULT 'queued',
        available_at timestamptz NOT NULL DEFAULT now(),
        claimed_by text,
        updated_at timestamptz,
        PRIMARY KEY (queue_name, workflow_id)
      );
      CREATE UNIQUE INDEX workflows_dedup ON workflows (queue_name, deduplication_id)
        WHERE deduplication_id IS NOT NULL;
      SELECT create_distributed_table('workflows', 'queue_name', shard_count => ${SHARDS});
      CREATE TABLE history (
        queue_name text NOT NULL,
        workflow_id text NOT NULL,
        status text NOT NULL,
        finished_at timestamptz,
        PRIMARY KEY (queue_name, workflow_id)
      );
      SELECT create_distributed_table('history', 'queue_name', colocate_with => 'workflows');
      CREATE TABLE queues (name text PRIMARY KEY, concurrency int NOT NULL);
      SELECT create_reference_table('queues');
    `);
    queueOn = [await queueOnWorker(0), await queueOnWorker(1)];
    await pool.query(`INSERT INTO queues VALUES ($1, 1), ($2, 2)`, queueOn);
  });

  afterAll(async () => {
    if (!pool?.ended) await pool?.end();
    await cluster?.stop();
  });

  async function queueOnWorker(index: number): Promise<string> {
    for (let n = 0; ; n++) {
      if ((await cluster.workerIndexFor('workflows', `queue-${n}`)) === index) return `queue-${n}`;
    }
  }

  async function plan(sql: string, params: unknown[] = []): Promise<string> {
    const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) ${sql}`, params);
    return rows.map((row) => row['QUERY PLAN']).join('\n');
  }

  /** The `Task Count` of each Citus scan in the plan of `sql`: `[1]` for a router query (one node, one shard). */
  async function taskCounts(sql: string, params: unknown[] = []): Promise<number[]> {
    return [...(await plan(sql, params)).matchAll(/Task Count: (\d+)/g)].map((match) => Number(match[1]));
  }

  async function enqueue(queue: string, workflowId: string, deduplicationId: string | null = null): Promise<void> {
    await pool.query(
      `INSERT INTO workflows (queue_name, workflow_id, deduplication_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
      [queue, workflowId, deduplicationId],
    );
  }

  /** `'ok'`, or the SQLSTATE and message `run` failed with. */
  async function outcomeOf(run: Promise<unknown>): Promise<{ code?: string; message: string } | 'ok'> {
    return run.then(
      () => 'ok' as const,
      (error: DatabaseError) => ({ code: error.code, message: error.message }),
    );
  }

  const CLAIM = `
    WITH c AS (
      SELECT workflow_id FROM workflows
      WHERE queue_name = $1 AND status = 'queued' AND available_at <= now()
      ORDER BY available_at, workflow_id
      LIMIT $2
      FOR UPDATE SKIP LOCKED
    )
    UPDATE workflows t SET status = 'running', claimed_by = $3, updated_at = now()
    FROM c WHERE t.queue_name = $1 AND t.workflow_id = c.workflow_id
    RETURNING t.workflow_id`;

  it('starts a coordinator and two workers with the extension, the workers holding the shards', async () => {
    const nodes = await cluster.coordinator.query<{ nodeport: number; groupid: number; shouldhaveshards: boolean }>(
      'SELECT nodeport, groupid, shouldhaveshards FROM pg_dist_node ORDER BY groupid',
    );
    expect(nodes).toEqual([
      { nodeport: cluster.coordinator.port, groupid: 0, shouldhaveshards: false },
      ...cluster.workers.map((worker, index) => ({
        nodeport: worker.port,
        groupid: index + 1,
        shouldhaveshards: true,
      })),
    ]);
    for (const url of cluster.workerUrls) {
      const client = new Client({ connectionString: url });
      await client.connect();
      try {
        const { rows } = await client.query(`SELECT extversion FROM pg_extension WHERE extname = 'citus'`);
        expect(rows).toEqual([{ extversion: expect.stringMatching(/^13\./) as string }]);
      } finally {
        await client.end();
      }
    }
  });

  it('routes enqueue, claim and outcome to one node; a lookup by workflow_id alone fans out to every shard', async () => {
    const queue = queueOn[0];
    expect(
      await taskCounts(
        `INSERT INTO workflows (queue_name, workflow_id, deduplication_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
        [queue, 'w1', 'd1'],
      ),
    ).toEqual([1]);
    expect(await taskCounts(CLAIM, [queue, 10, 'executor-1'])).toEqual([1]);
    expect(
      await taskCounts(`DELETE FROM workflows WHERE queue_name = $1 AND workflow_id = ANY($2) RETURNING workflow_id`, [
        queue,
        ['w1', 'w2'],
      ]),
    ).toEqual([1]);
    expect(await taskCounts(`SELECT * FROM workflows WHERE workflow_id = $1`, ['w1'])).toEqual([SHARDS]);

    await enqueue(queue, 'w1', 'd1');
    await enqueue(queue, 'w2');
    expect((await pool.query(CLAIM, [queue, 10, 'executor-1'])).rows).toEqual([
      { workflow_id: 'w1' },
      { workflow_id: 'w2' },
    ]);
  });

  it('moves rows between co-located tables on one node statement by statement, not as DELETE … RETURNING into INSERT', async () => {
    const queue = queueOn[1];
    const move = (queueName: string, ids: string) => `
      WITH moved AS (
        DELETE FROM workflows WHERE queue_name = ${queueName} AND workflow_id = ANY(${ids})
        RETURNING queue_name, workflow_id, status
      )
      INSERT INTO history (queue_name, workflow_id, status, finished_at)
      SELECT queue_name, workflow_id, status, now() FROM moved`;
    expect(await plan(move(escapeLiteral(queue), `'{m1}'`))).toMatch(
      /Citus INSERT \.\.\. SELECT\)\n\s+INSERT\/SELECT method: pull to coordinator/,
    );
    expect(await outcomeOf(plan(move('$1', '$2'), [queue, ['m1']]))).toEqual({
      code: '0A000',
      message: 'could not create distributed plan',
    });

    const copy = `
      INSERT INTO history (queue_name, workflow_id, status, finished_at)
      SELECT queue_name, workflow_id, status, now() FROM workflows WHERE queue_name = $1 AND workflow_id = ANY($2)`;
    const remove = `DELETE FROM workflows WHERE queue_name = $1 AND workflow_id = ANY($2)`;
    expect(await taskCounts(copy, [queue, ['m1']])).toEqual([1]);
    expect(await plan(copy, [queue, ['m1']])).not.toMatch(/INSERT \.\.\. SELECT|Subplan/);
    expect(await taskCounts(remove, [queue, ['m1']])).toEqual([1]);
    const updateFromDeleted = `
      WITH moved AS (DELETE FROM workflows WHERE queue_name = $1 AND workflow_id = ANY($2) RETURNING workflow_id)
      UPDATE history h SET status = 'superseded' FROM moved m WHERE h.queue_name = $1 AND h.workflow_id = m.workflow_id`;
    expect(await taskCounts(updateFromDeleted, [queue, ['m1']])).toEqual([1]);

    const ids = Array.from({ length: 8 }, (_, n) => `m${n}`);
    for (const id of ids) await enqueue(queue, id);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(copy, [queue, ['m0']]);
      await client.query(remove, [queue, ['m0']]);
      await client.query('COMMIT');
      for (const id of ids.slice(1)) {
        await client.query({ name: 'move', text: move('$1', '$2'), values: [queue, [id]] });
      }
    } finally {
      client.release();
    }
    const { rows } = await pool.query(`SELECT workflow_id FROM history WHERE queue_name = $1 ORDER BY 1`, [queue]);
    expect(rows).toEqual(ids.map((id) => ({ workflow_id: id })));
  });

  it('joins a reference table in a router query', async () => {
    const sql = `SELECT w.workflow_id, q.concurrency FROM workflows w JOIN queues q ON q.name = w.queue_name
                 WHERE w.queue_name = $1`;
    expect(await taskCounts(sql, [queueOn[0]])).toEqual([1]);
    expect(await cluster.workers[0].query('SELECT name FROM queues ORDER BY name')).toEqual(
      [...queueOn].sort().map((name) => ({ name })),
    );
  });

  it('keeps a dedup race exact: of two concurrent inserts one commits, the other gets 23505 (no constraint field)', async () => {
    const queue = queueOn[0];
    const worker = cluster.workers[0];
    const [first, second] = [new Client(cluster.url), new Client(cluster.url)];
    await Promise.all([first.connect(), second.connect()]);
    try {
      const insert = `INSERT INTO workflows (queue_name, workflow_id, deduplication_id) VALUES ($1, $2, 'race')`;
      await first.query('BEGIN');
      await first.query(insert, [queue, 'race-1']);
      const raced = second.query(insert, [queue, 'race-2']).then(
        () => undefined,
        (error: DatabaseError) => error,
      );
      await waitFor(
        async () => (await worker.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'`)).length > 0,
        { what: 'the second insert to wait for the first on the worker' },
      );
      await first.query('COMMIT');
      const error = await raced;
      expect(error?.code).toBe('23505');
      expect(error?.message).toMatch(/^duplicate key value violates unique constraint "workflows_dedup_\d+"$/);
      expect(error?.constraint).toBeUndefined();
      expect(error?.detail).toBe(`Key (queue_name, deduplication_id)=(${queue}, race) already exists.`);
      expect(error?.where).toBe(`while executing command on 127.0.0.1:${worker.port}`);

      const again = await second.query(`${insert} ON CONFLICT DO NOTHING`, [queue, 'race-3']);
      expect(again.rowCount).toBe(0);
      const { rows } = await pool.query(
        `SELECT workflow_id FROM workflows WHERE queue_name = $1 AND deduplication_id = 'race'`,
        [queue],
      );
      expect(rows).toEqual([{ workflow_id: 'race-1' }]);
    } finally {
      await Promise.all([first.end(), second.end()]);
    }
  });

  it('fires pg_notify where the statement runs: a routed one on the worker, never on the coordinator', async () => {
    const listeners = [cluster.url, ...cluster.workerUrls].map((url) => new Client(url));
    const heard: string[][] = listeners.map(() => []);
    await Promise.all(listeners.map((listener) => listener.connect()));
    try {
      listeners.forEach((listener, index) => listener.on('notification', (note) => heard[index].push(note.payload!)));
      await Promise.all(listeners.map((listener) => listener.query('LISTEN wake')));
      const [queue] = queueOn;
      await enqueue(queue, 'n1');
      await pool.query(
        `SELECT pg_notify('wake', 'routed:' || workflow_id) FROM workflows WHERE queue_name = $1 AND workflow_id = 'n1'`,
        [queue],
      );
      await pool.query(
        `WITH ins AS (INSERT INTO workflows (queue_name, workflow_id) VALUES ($1, 'n2') RETURNING workflow_id)
         SELECT pg_notify('wake', 'insert-cte:' || workflow_id) FROM ins`,
        [queue],
      );
      await pool.query(`SELECT pg_notify('wake', 'coordinator')`);
      await waitFor(() => heard[0].includes('coordinator') && heard[1].length > 0, { what: 'the notifications' });
      expect(heard).toEqual([['insert-cte:n2', 'coordinator'], ['routed:n1'], []]);
    } finally {
      await Promise.all(listeners.map((listener) => listener.end()));
    }
  });

  it('runs named (prepared) statements through the coordinator, past the generic-plan threshold', async () => {
    const client = await pool.connect();
    try {
      for (let n = 0; n < 8; n++) {
        const queue = queueOn[n % 2];
        const inserted = await client.query({
          name: 'enqueue-later',
          text: `INSERT INTO workflows (queue_name, workflow_id, available_at) VALUES ($1, $2, now() + $3 * interval '1 ms')
                 ON CONFLICT DO NOTHING RETURNING workflow_id`,
          values: [queue, `p${n}`, -60_000],
        });
        expect(inserted.rows).toEqual([{ workflow_id: `p${n}` }]);
        const claimed = await client.query({ name: 'claim', text: CLAIM, values: [queue, 1, 'executor-p'] });
        expect(claimed.rows).toEqual([{ workflow_id: `p${n}` }]);
      }
      const { rows } = await client.query(`SELECT count(*)::int AS n FROM workflows WHERE claimed_by = 'executor-p'`);
      expect(rows).toEqual([{ n: 8 }]);
    } finally {
      client.release();
    }
  });

  it('takes now() and now() + $n * interval as values; refuses volatile and column-dependent stable expressions', async () => {
    const queue = queueOn[1];
    await enqueue(queue, 't1');
    const where = `WHERE queue_name = '${queue}' AND workflow_id = 't1'`;
    const attempts: Record<string, [string, unknown[]?]> = {
      'INSERT VALUES now(), clock_timestamp()': [
        `INSERT INTO workflows (queue_name, workflow_id, available_at, updated_at)
         VALUES ('${queue}', 't2', now(), clock_timestamp())`,
      ],
      'INSERT VALUES now() + $1 * interval': [
        `INSERT INTO workflows (queue_name, workflow_id, available_at) VALUES ('${queue}', 't3', now() + $1 * interval '1 ms')`,
        [500],
      ],
      'UPDATE SET now()': [`UPDATE workflows SET updated_at = now() ${where}`],
      'UPDATE SET now() + $1 * interval': [
        `UPDATE workflows SET available_at = now() + $1 * interval '1 ms' ${where}`,
        [5],
      ],
      'UPDATE SET clock_timestamp()': [`UPDATE workflows SET updated_at = clock_timestamp() ${where}`],
      'UPDATE SET now() + column * interval': [
        `UPDATE workflows SET available_at = now() + length(workflow_id) * interval '1 ms' ${where}`,
      ],
      'UPDATE SET column + $1 * interval': [
        `UPDATE workflows SET available_at = available_at + $1 * interval '1 ms' ${where}`,
        [5],
      ],
      'UPDATE SET COALESCE(column, now())': [`UPDATE workflows SET updated_at = COALESCE(updated_at, now()) ${where}`],
      'UPDATE SET CASE … now() …': [
        `UPDATE workflows SET updated_at = CASE WHEN status = 'queued' THEN now() ELSE updated_at END ${where}`,
      ],
      'UPDATE WHERE column <= now()': [
        `UPDATE workflows SET claimed_by = 'x' WHERE queue_name = '${queue}' AND available_at <= now()`,
      ],
      'UPDATE WHERE column <= clock_timestamp()': [
        `UPDATE workflows SET claimed_by = 'x' WHERE queue_name = '${queue}' AND available_at <= clock_timestamp()`,
      ],
      'UPDATE RETURNING now()': [`UPDATE workflows SET status = 'queued' ${where} RETURNING now() AS at`],
      'INSERT RETURNING pg_notify()': [
        `INSERT INTO workflows (queue_name, workflow_id) VALUES ('${queue}', 't4') RETURNING pg_notify('wake', '')`,
      ],
      'ON CONFLICT DO UPDATE SET now()': [
        `INSERT INTO workflows (queue_name, workflow_id) VALUES ('${queue}', 't1')
         ON CONFLICT (queue_name, workflow_id) DO UPDATE SET updated_at = now()`,
      ],
      'ON CONFLICT DO UPDATE SET excluded.column': [
        `INSERT INTO workflows (queue_name, workflow_id) VALUES ('${queue}', 't1')
         ON CONFLICT (queue_name, workflow_id) DO UPDATE SET updated_at = excluded.available_at`,
      ],
    };
    const outcomes: Record<string, unknown> = {};
    for (const [shape, [sql, params]] of Object.entries(attempts)) {
      outcomes[shape] = await outcomeOf(pool.query(sql, params));
    }
    const refused = (message: string) => ({ code: '0A000', message });
    expect(outcomes).toEqual({
      'INSERT VALUES now(), clock_timestamp()': 'ok',
      'INSERT VALUES now() + $1 * interval': 'ok',
      'UPDATE SET now()': 'ok',
      'UPDATE SET now() + $1 * interval': 'ok',
      'UPDATE SET clock_timestamp()': refused(
        'functions used in UPDATE queries on distributed tables must not be VOLATILE',
      ),
      'UPDATE SET now() + column * interval': refused(
        'STABLE functions used in UPDATE queries cannot be called with column references',
      ),
      'UPDATE SET column + $1 * interval': refused(
        'STABLE functions used in UPDATE queries cannot be called with column references',
      ),
      'UPDATE SET COALESCE(column, now())': refused(
        'non-IMMUTABLE functions are not allowed in CASE or COALESCE statements',
      ),
      'UPDATE SET CASE … now() …': refused('non-IMMUTABLE functions are not allowed in CASE or COALESCE statements'),
      'UPDATE WHERE column <= now()': 'ok',
      'UPDATE WHERE column <= clock_timestamp()': refused(
        'functions used in the WHERE/ON/WHEN clause of modification queries on distributed tables must not be VOLATILE',
      ),
      'UPDATE RETURNING now()': refused('non-IMMUTABLE functions are not allowed in the RETURNING clause'),
      'INSERT RETURNING pg_notify()': refused('non-IMMUTABLE functions are not allowed in the RETURNING clause'),
      'ON CONFLICT DO UPDATE SET now()': refused(
        'functions used in the DO UPDATE SET clause of INSERTs on distributed tables must be marked IMMUTABLE',
      ),
      'ON CONFLICT DO UPDATE SET excluded.column': 'ok',
    });
  });

  it('with one worker stopped: queues on the other keep working, the rest fails with 08006 naming the node', async () => {
    const [downQueue, upQueue] = queueOn;
    const down = cluster.workers[0];
    await cluster.stopWorker(0);
    try {
      const refused = {
        code: '08006',
        message: expect.stringContaining(
          `connection to the remote node postgres@127.0.0.1:${down.port} failed with the following error: Connection refused`,
        ) as string,
      };
      expect({
        'enqueue on the live worker': await outcomeOf(enqueue(upQueue, 'f1')),
        'claim on the live worker': await outcomeOf(pool.query(CLAIM, [upQueue, 10, 'executor-f'])),
        'reference table read': await outcomeOf(pool.query('SELECT * FROM queues')),
        'enqueue on the stopped worker': await outcomeOf(enqueue(downQueue, 'f2')),
        'claim on the stopped worker': await outcomeOf(pool.query(CLAIM, [downQueue, 10, 'executor-f'])),
        'lookup by workflow_id alone': await outcomeOf(pool.query(`SELECT * FROM workflows WHERE workflow_id = 'f1'`)),
        'reference table write': await outcomeOf(
          pool.query(`UPDATE queues SET concurrency = 3 WHERE name = $1`, [upQueue]),
        ),
      }).toEqual({
        'enqueue on the live worker': 'ok',
        'claim on the live worker': 'ok',
        'reference table read': 'ok',
        'enqueue on the stopped worker': refused,
        'claim on the stopped worker': refused,
        'lookup by workflow_id alone': refused,
        'reference table write': refused,
      });
    } finally {
      await cluster.startWorker(0);
    }
    await waitFor(() => outcomeOf(enqueue(downQueue, 'f3')).then((outcome) => outcome === 'ok'), {
      timeoutMs: 30_000,
      what: 'the restarted worker to take enqueues again',
    });
  });

  it('stop() stops every node and deletes its files', async () => {
    const nodes = [cluster.coordinator, ...cluster.workers];
    await pool.end();
    await cluster.stop();
    expect(nodes.filter((node) => existsSync(node.dataDir))).toEqual([]);
    for (const node of nodes) await expect(node.query('SELECT 1')).rejects.toThrow(/ECONNREFUSED/);
  });
});
