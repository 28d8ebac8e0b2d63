/**
 * Retention by partition: a day of history (and its steps) is dropped whole once every workflow created that day
 * finished more than the retention ago, and waits while one of that day is still active or finished within it; the
 * daily partitions are created ahead, contiguously. Days in the past are made here by hand, as they would have been
 * made ahead by a running application.
 */
import type { Pool } from 'pg';
import { HistoryPartitions, MIGRATIONS, QueueDatabase, runMigrations } from 'nest-dedup-queue/testing';
import { DataSource } from 'typeorm';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';

const DAY_MS = 86_400_000;
const RETENTION_MS = 7 * DAY_MS;

describe('retention drops whole days of history', () => {
  const schema = uniqueSchema('retention_days');
  let pool: Pool;
  let dataSource: DataSource;
  let partitions: HistoryPartitions;

  /** `YYYY-MM-DD` of the day (UTC) `daysAgo` days before today. */
  const day = (daysAgo: number) => new Date(Date.now() - daysAgo * DAY_MS).toISOString().slice(0, 10);
  const tables = async () =>
    (
      await pool.query<{ relname: string }>(
        `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'
           AND relname ~ '^(workflow_history|steps|workflow_messages|workflow_streams)_p' ORDER BY relname`,
        [schema],
      )
    ).rows.map((row) => row.relname);
  /** Makes the partitions of a past day, as `extend` made them when that day was ahead. */
  const makeDay = async (daysAgo: number) => {
    const date = day(daysAgo);
    const range = `FROM ('${date} 00:00:00+00') TO ('${date} 00:00:00+00'::timestamptz + interval '1 day')`;
    const suffix = date.replace(/-/g, '');
    await pool.query(
      `CREATE TABLE "${schema}".workflow_history_p${suffix} PARTITION OF "${schema}".workflow_history FOR VALUES ${range}`,
    );
    await pool.query(`CREATE TABLE "${schema}".steps_p${suffix} PARTITION OF "${schema}".steps FOR VALUES ${range}`);
    await pool.query(
      `CREATE TABLE "${schema}".workflow_messages_p${suffix} PARTITION OF "${schema}".workflow_messages
         FOR VALUES ${range}`,
    );
    await pool.query(
      `CREATE TABLE "${schema}".workflow_streams_p${suffix} PARTITION OF "${schema}".workflow_streams
         FOR VALUES ${range}`,
    );
    return suffix;
  };
  /** A finished workflow created `daysAgo` days ago (noon UTC) that finished `finishedAgoMs` ago, with a step. */
  const finished = async (id: string, daysAgo: number, finishedAgoMs: number) => {
    const createdAt = `${day(daysAgo)} 12:00:00+00`;
    await pool.query(
      `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, created_at,
         started_at, completed_at)
       VALUES ($1, 'tasks', 'Tasks.run', 'SUCCESS', '[]', $2, $2, now() - $3::float8 * interval '1 millisecond')`,
      [id, createdAt, finishedAgoMs],
    );
    await pool.query(
      `INSERT INTO "${schema}".steps (workflow_id, step_index, step_name, queue_name, workflow_created_at)
       VALUES ($1, 0, 'only', 'tasks', $2)`,
      [id, createdAt],
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_messages (queue_name, workflow_id, workflow_created_at, topic, message)
       VALUES ('tasks', $1, $2, '', '"unread"')`,
      [id, createdAt],
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_streams (queue_name, workflow_id, workflow_created_at, stream_key,
         stream_offset, value, total_bytes)
       VALUES ('tasks', $1, $2, 'tokens', 0, '"token"', 7)`,
      [id, createdAt],
    );
  };

  beforeAll(async () => {
    pool = testPool();
    dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(database, MIGRATIONS);
    partitions = new HistoryPartitions(database);
  });

  /** As if the schema had been made (or upgraded to 1.0) `daysAgo` days ago: daily partitions start then. */
  const firstDayWas = async (daysAgo: number) => {
    const start = `'${day(daysAgo)} 00:00:00+00'`;
    for (const [parent, before] of [
      ['steps', 'steps_before'],
      ['workflow_messages', 'workflow_messages_before'],
      ['workflow_streams', 'workflow_streams_before'],
    ]) {
      await pool.query(`ALTER TABLE "${schema}".${parent} DETACH PARTITION "${schema}".${before}`);
      await pool.query(
        `ALTER TABLE "${schema}".${parent} ATTACH PARTITION "${schema}".${before} FOR VALUES FROM (MINVALUE) TO (${start})`,
      );
    }
    await pool.query(
      `ALTER TABLE "${schema}".workflow_history_legacy DROP CONSTRAINT workflow_history_legacy_created_at,
         ADD CONSTRAINT workflow_history_legacy_created_at CHECK (created_at < ${start})`,
    );
  };

  afterAll(async () => {
    await dataSource.destroy();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('creates the days ahead contiguously, from the first one after the upgrade', async () => {
    const created = await partitions.extend(3);
    expect(created).toEqual([day(-1), day(-2), day(-3)]);
    expect(await partitions.extend(3)).toEqual([]);
    expect(await partitions.extend(4)).toEqual([day(-4)]);
    const suffixes = [1, 2, 3, 4].map((ahead) => day(-ahead).replace(/-/g, ''));
    expect(await tables()).toEqual([
      ...suffixes.map((suffix) => `steps_p${suffix}`),
      ...suffixes.map((suffix) => `workflow_history_p${suffix}`),
      ...suffixes.map((suffix) => `workflow_messages_p${suffix}`),
      ...suffixes.map((suffix) => `workflow_streams_p${suffix}`),
    ]);
  });

  it('drops a day whose workflows all finished before the retention, and keeps the others', async () => {
    await firstDayWas(20);
    const old = await makeDay(20);
    const recent = await makeDay(19);
    const active = await makeDay(18);
    await finished('old-1', 20, 15 * DAY_MS);
    await finished('old-2', 20, 14 * DAY_MS);
    await finished('late-finisher', 19, 60_000);
    await finished('beside-active', 18, 15 * DAY_MS);
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, created_at)
       VALUES ('still-queued', 'tasks', 'Tasks.run', 'ENQUEUED', '[]', $1)`,
      [`${day(18)} 13:00:00+00`],
    );

    for (const workflowId of ['old-1', 'beside-active']) {
      await pool.query(
        `INSERT INTO "${schema}".workflow_events (queue_name, workflow_id, key, value, workflow_created_at)
         SELECT queue_name, workflow_id, 'progress', '1', created_at FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      );
    }

    const result = await partitions.prune(RETENTION_MS);

    expect(result.days).toEqual([old]);
    const events = await pool.query(`SELECT workflow_id FROM "${schema}".workflow_events ORDER BY 1`);
    expect(events.rows.map((row) => row.workflow_id)).toEqual(['beside-active']);
    const left = await tables();
    expect(left).not.toContain(`workflow_history_p${old}`);
    expect(left).not.toContain(`steps_p${old}`);
    expect(left).not.toContain(`workflow_messages_p${old}`);
    expect(left).not.toContain(`workflow_streams_p${old}`);
    expect(left).toEqual(expect.arrayContaining([`workflow_history_p${recent}`, `workflow_history_p${active}`]));
    const kept = await pool.query(
      `SELECT workflow_id FROM "${schema}".workflows WHERE workflow_id <> 'still-queued' ORDER BY 1`,
    );
    expect(kept.rows.map((row) => row.workflow_id)).toEqual(['beside-active', 'late-finisher']);
    const steps = await pool.query(`SELECT workflow_id FROM "${schema}".steps ORDER BY 1`);
    expect(steps.rows.map((row) => row.workflow_id)).toEqual(['beside-active', 'late-finisher']);
    const messages = await pool.query(`SELECT workflow_id FROM "${schema}".workflow_messages ORDER BY 1`);
    expect(messages.rows.map((row) => row.workflow_id)).toEqual(['beside-active', 'late-finisher']);
    const streams = await pool.query(`SELECT workflow_id FROM "${schema}".workflow_streams ORDER BY 1`);
    expect(streams.rows.map((row) => row.workflow_id)).toEqual(['beside-active', 'late-finisher']);
  });
});
