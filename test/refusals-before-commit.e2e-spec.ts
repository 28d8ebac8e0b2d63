/**
 * A refused duplicate whose holder committed before the enqueue batch is answered as soon as the batch's statement
 * has run, without waiting for the commit (and its flush) that only the batch's inserted rows need; a duplicate of a
 * row of the same batch waits for that commit. The batch's commit is held by a deferred trigger of the test's that
 * waits on an advisory lock the test holds. Underneath, `QueueDatabase.queryWithRowsBeforeCommit` hands rows over
 * before the commit and leaves its connection usable after an error before or at the commit.
 */
import { Injectable } from '@nestjs/common';
import { DatabaseQueryError, QueueDeduplicatedError, QueueService, Workflow } from 'nest-dedup-queue';
import { QueueDatabase } from 'nest-dedup-queue/testing';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { databaseUrl } from './support/database';
import { useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const GATE = 74_210;
const HOUR = 3_600_000;

@Injectable()
class NoOpTasks {
  @Workflow()
  async noop(): Promise<void> {}
}

/** The test's own session, which holds the gate's lock. */
const gate = new Client({ connectionString: databaseUrl() });

const suite = useQueueApp('refusals_early', { queues: [{ name: 'tasks' }], worker: false }, [NoOpTasks], {
  tasks: NoOpTasks,
  beforeClose: () => gate.end(),
  afterStart: ({ pool, schema }) =>
    pool.query(`
      CREATE FUNCTION "${schema}".wait_at_gate() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.deduplication_id LIKE 'gated-%' THEN PERFORM pg_advisory_xact_lock_shared(${GATE}); END IF;
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER wait_at_gate AFTER INSERT ON "${schema}".workflow_queue
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${schema}".wait_at_gate();
      CREATE TABLE "${schema}".probe (n int PRIMARY KEY);
      CREATE FUNCTION "${schema}".refuse_odd() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.n % 2 = 1 THEN RAISE EXCEPTION 'odd probe %', NEW.n; END IF;
        IF NEW.n >= 100 THEN PERFORM pg_advisory_xact_lock_shared(${GATE}); END IF;
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER refuse_odd AFTER INSERT ON "${schema}".probe
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${schema}".refuse_odd();`),
});

beforeAll(async () => {
  await gate.connect();
});

/** Whether a commit of the app's waits at the gate (the deferred trigger is running, so the rows were sent). */
const waitingAtGate = async () =>
  (
    await suite.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`,
      [GATE],
    )
  ).rows[0].n > 0;

/** Tracks whether a promise has settled, without awaiting it. */
function track<T>(promise: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  return { promise, settled: () => settled };
}

describe('a batch whose commit is held', () => {
  it('answers the refusal of a key held before it at once, and the rest only after its commit', async () => {
    const queues: QueueService = suite.app.queues;
    const { tasks } = suite;
    const holder = await queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'k', delayMs: HOUR });
    await gate.query('SELECT pg_advisory_lock($1)', [GATE]);

    // Two lone calls fill both statements in flight; the next three go together in one batch when a place frees.
    const first = queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'free-1' });
    const second = queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'free-2' });
    const refusedByOld = track(queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'k' }));
    const gated = track(queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'gated-1' }));
    const refusedByGated = track(queues.enqueue('tasks', tasks.noop, [], { deduplicationId: 'gated-1' }));
    await Promise.all([first, second]);

    await waitFor(waitingAtGate, { what: "the batch's commit waiting at the gate" });
    await waitFor(refusedByOld.settled, { what: 'the refusal answered before the commit' });
    const refusal = await refusedByOld.promise.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(QueueDeduplicatedError);
    expect(refusal).toMatchObject({ deduplicationId: 'k', existingWorkflowId: holder.workflowId });
    expect(gated.settled()).toBe(false);
    expect(refusedByGated.settled()).toBe(false);

    await gate.query('SELECT pg_advisory_unlock($1)', [GATE]);
    const stored = await gated.promise;
    await expect(refusedByGated.promise).rejects.toMatchObject({
      deduplicationId: 'gated-1',
      existingWorkflowId: stored.workflowId,
    });
    const { rows } = await suite.pool.query<{ deduplication_id: string; n: number }>(
      `SELECT deduplication_id, count(*)::int AS n FROM "${suite.schema}".workflow_queue
       GROUP BY deduplication_id ORDER BY deduplication_id`,
    );
    expect(rows).toEqual([
      { deduplication_id: 'free-1', n: 1 },
      { deduplication_id: 'free-2', n: 1 },
      { deduplication_id: 'gated-1', n: 1 },
      { deduplication_id: 'k', n: 1 },
    ]);
  });
});

describe('QueueDatabase.queryWithRowsBeforeCommit', () => {
  let dataSource: DataSource;
  let database: QueueDatabase;

  beforeAll(async () => {
    dataSource = await new DataSource({ type: 'postgres', url: databaseUrl(), poolSize: 1 }).initialize();
    database = new QueueDatabase(dataSource, suite.schema, false);
  });

  afterAll(async () => {
    await dataSource.destroy();
  });

  it('hands the rows over while the commit waits, and resolves with them after it', async () => {
    await gate.query('SELECT pg_advisory_lock($1)', [GATE]);
    let early: unknown[] | undefined;
    const inserted = track(
      database.queryWithRowsBeforeCommit(
        `INSERT INTO "${suite.schema}".probe VALUES (100), (102) RETURNING n`,
        [],
        { prepared: true },
        (rows) => (early = rows),
      ),
    );
    await waitFor(waitingAtGate, { what: 'the commit waiting at the gate' });
    await waitFor(() => early !== undefined, { what: 'the rows before the commit' });
    expect(early).toEqual([{ n: 100 }, { n: 102 }]);
    expect(inserted.settled()).toBe(false);
    await gate.query('SELECT pg_advisory_unlock($1)', [GATE]);
    expect(await inserted.promise).toEqual([{ n: 100 }, { n: 102 }]);
    expect(await database.query(`SELECT n FROM "${suite.schema}".probe ORDER BY n`)).toEqual([{ n: 100 }, { n: 102 }]);
  });

  it('keeps its connection usable after an error before the rows and after one at the commit', async () => {
    let handedOver = 0;
    const count = () => handedOver++;
    await expect(database.queryWithRowsBeforeCommit('SELECT 1 / $1::int AS n', [0], {}, count)).rejects.toBeInstanceOf(
      DatabaseQueryError,
    );
    expect(handedOver).toBe(0);
    expect(await database.query('SELECT 2 AS n')).toEqual([{ n: 2 }]);

    await expect(
      database.queryWithRowsBeforeCommit(`INSERT INTO "${suite.schema}".probe VALUES (1) RETURNING n`, [], {}, count),
    ).rejects.toThrow(/odd probe 1/);
    expect(handedOver).toBe(1);
    expect(await database.query(`SELECT count(*)::int AS n FROM "${suite.schema}".probe WHERE n < 100`)).toEqual([
      { n: 0 },
    ]);

    expect(
      await database.queryWithRowsBeforeCommit(
        `INSERT INTO "${suite.schema}".probe VALUES (2) RETURNING n`,
        [],
        {},
        count,
      ),
    ).toEqual([{ n: 2 }]);
    expect(handedOver).toBe(2);
  });
});
