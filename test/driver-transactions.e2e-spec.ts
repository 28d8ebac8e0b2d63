/**
 * Enqueue in any driver's transaction: `enqueue(..., { db })` and `enqueueMany(..., { db })` with `fromPg`,
 * `fromKnex`, `fromKysely`, `fromDrizzle` and `fromPrisma` over real transactions of each library
 * (test/fixtures/transaction-drivers.ts), each case written once for all of them. Workers poll only once a minute,
 * so a workflow that runs within seconds of the commit was woken by it.
 */
import { Injectable } from '@nestjs/common';
import {
  InvalidArgumentError,
  QueueDeduplicatedError,
  QueueService,
  TransactionSql,
  Workflow,
  fromPg,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { ConnectedDriver, TRANSACTION_DRIVERS } from './fixtures/transaction-drivers';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { activeTableLockWaits } from './support/lock-waits';

@Injectable()
class DriverTasks {
  readonly ran: string[] = [];

  @Workflow()
  async record(label: string): Promise<string> {
    this.ran.push(label);
    return label;
  }
}

const QUEUE = 'drivers';
/** Far longer than any case waits for a result: only the wake-up on commit starts a workflow in time. */
const POLL_INTERVAL_MS = 60_000;
const PROMPTLY = { timeoutMs: 10_000 };
const AN_HOUR = 3_600_000;

const schema = uniqueSchema('drivers');
const table = `"${schema}".workflows`;
let pool: Pool;
let app: QueueApp;
let queues: QueueService;
let tasks: DriverTasks;

beforeAll(async () => {
  pool = testPool();
  app = await startQueueApp(
    { schema, queues: [{ name: QUEUE }], pollIntervalMs: POLL_INTERVAL_MS, shutdownGraceMs: 1000 },
    [DriverTasks],
  );
  ({ queues } = app);
  tasks = app.get(DriverTasks);
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY)`);
});

afterAll(async () => {
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

const workflowIdsFor = async (key: string) =>
  (await pool.query(`SELECT workflow_id FROM ${table} WHERE deduplication_id = $1 ORDER BY seq`, [key])).rows.map(
    (row) => row.workflow_id as string,
  );
const workflowExists = async (workflowId: string) =>
  (await pool.query(`SELECT 1 FROM ${table} WHERE workflow_id = $1`, [workflowId])).rowCount === 1;
const orderExists = async (id: string) =>
  (await pool.query(`SELECT 1 FROM "${schema}".orders WHERE id = $1`, [id])).rowCount === 1;
const waitingInserts = () => activeTableLockWaits(pool, schema);
/** Keeps a promise's outcome without an unhandled rejection while the test does other things. */
const settle = <T>(promise: Promise<T>) =>
  promise.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );

describe.each(TRANSACTION_DRIVERS.map((driver) => [driver.name, driver] as const))(
  'enqueue in a %s transaction',
  (name, driver) => {
    const key = (label: string) => `${name.split(' ')[0]}:${label}`;
    let connected: ConnectedDriver;

    beforeAll(async () => {
      connected = await driver.connect(schema);
    });

    afterAll(async () => {
      await connected?.close();
    });

    it('stores the workflow only on commit, and the commit wakes a worker that runs it to SUCCESS', async () => {
      const order = key('order-committed');
      const workflowId = await connected.transaction(async (tx) => {
        await tx.insertOrder(order);
        const handle = await queues.enqueue(QUEUE, tasks.record, [key('committed')], {
          deduplicationId: key('commit'),
          db: tx.db,
        });
        expect(handle.created).toBe(true);
        expect(await workflowExists(handle.workflowId)).toBe(false);
        return handle.workflowId;
      });

      expect(await orderExists(order)).toBe(true);
      const handle = await queues.retrieve<string>(workflowId);
      await expect(handle.getResult(PROMPTLY)).resolves.toBe(key('committed'));
      expect((await handle.getStatus()).status).toBe('SUCCESS');
      expect(tasks.ran.filter((label) => label === key('committed'))).toHaveLength(1);
    });

    it('leaves nothing when the transaction rolls back', async () => {
      const order = key('order-rolled-back');
      let enqueued: string[] = [];
      await expect(
        connected.transaction(async (tx) => {
          await tx.insertOrder(order);
          const one = await queues.enqueue(QUEUE, tasks.record, [key('rolled-back')], {
            deduplicationId: key('rollback'),
            db: tx.db,
          });
          const many = await queues.enqueueMany(
            QUEUE,
            tasks.record,
            [1, 2].map((n) => ({
              args: [key(`rolled-back-${n}`)],
              options: { deduplicationId: key(`rollback-${n}`) },
            })),
            { db: tx.db },
          );
          expect(many.map((result) => result.status)).toEqual(['created', 'created']);
          enqueued = [one.workflowId, ...many.map((result) => result.workflowId)];
          throw new Error('the caller rolls back');
        }),
      ).rejects.toThrow('the caller rolls back');

      expect(enqueued).toHaveLength(3);
      for (const workflowId of enqueued) expect(await workflowExists(workflowId)).toBe(false);
      for (const label of ['rollback', 'rollback-1', 'rollback-2'])
        expect(await workflowIdsFor(key(label))).toEqual([]);
      expect(await orderExists(order)).toBe(false);
      // The keys were never held: they are free now.
      const again = await queues.enqueue(QUEUE, tasks.record, [key('after-rollback')], {
        deduplicationId: key('rollback'),
      });
      expect(again.created).toBe(true);
      await expect(again.getResult(PROMPTLY)).resolves.toBe(key('after-rollback'));
      expect(tasks.ran.filter((label) => label.startsWith(key('rolled-back')))).toEqual([]);
    });

    it('raises QueueDeduplicatedError for a duplicate, and the transaction still commits its other writes', async () => {
      const holder = await queues.enqueue(QUEUE, tasks.record, [key('holder')], {
        deduplicationId: key('held'),
        delayMs: AN_HOUR,
      });
      const taken = await connected.transaction(async (tx) => {
        await tx.insertOrder(key('order-before'));
        const error = await queues
          .enqueue(QUEUE, tasks.record, [key('dup')], { deduplicationId: key('held'), db: tx.db })
          .catch((caught: unknown) => caught);
        expect(error).toBeInstanceOf(QueueDeduplicatedError);
        expect(error).toMatchObject({
          queueName: QUEUE,
          deduplicationId: key('held'),
          existingWorkflowId: holder.workflowId,
        });

        // A key taken earlier in the same transaction is held for the rest of it.
        const inside = await queues.enqueue(QUEUE, tasks.record, [key('inside')], {
          deduplicationId: key('inside'),
          db: tx.db,
        });
        await expect(
          queues.enqueue(QUEUE, tasks.record, [key('inside-again')], { deduplicationId: key('inside'), db: tx.db }),
        ).rejects.toMatchObject({ name: 'QueueDeduplicatedError', existingWorkflowId: inside.workflowId });

        // The transaction is still usable after the duplicates.
        await tx.insertOrder(key('order-after'));
        return inside.workflowId;
      });

      expect(await orderExists(key('order-before'))).toBe(true);
      expect(await orderExists(key('order-after'))).toBe(true);
      expect(await workflowIdsFor(key('held'))).toEqual([holder.workflowId]);
      expect(await workflowIdsFor(key('inside'))).toEqual([taken]);
      await expect((await queues.retrieve(taken)).getResult(PROMPTLY)).resolves.toBe(key('inside'));
      await queues.cancel(holder.workflowId);
    });

    it('enqueues many in the transaction, each item with its own outcome', async () => {
      const holder = await queues.enqueue(QUEUE, tasks.record, [key('bulk-holder')], {
        deduplicationId: key('bulk-held'),
        delayMs: AN_HOUR,
      });
      const results = await connected.transaction(async (tx) => {
        const bulk = await queues.enqueueMany(
          QUEUE,
          tasks.record,
          [
            { args: [key('bulk-1')], options: { deduplicationId: key('bulk-1') } },
            { args: [key('bulk-dup')], options: { deduplicationId: key('bulk-held') } },
            { args: [key('bulk-2')], options: { deduplicationId: key('bulk-2') } },
            { args: [key('bulk-2-again')], options: { deduplicationId: key('bulk-2') } },
          ],
          { db: tx.db },
        );
        for (const result of bulk) {
          expect(await workflowExists(result.workflowId)).toBe(result.workflowId === holder.workflowId);
        }
        await tx.insertOrder(key('order-bulk'));
        return bulk;
      });

      expect(results).toEqual([
        { status: 'created', workflowId: expect.any(String) },
        { status: 'duplicate', workflowId: holder.workflowId },
        { status: 'created', workflowId: expect.any(String) },
        { status: 'duplicate', workflowId: results[2].workflowId },
      ]);
      expect(await orderExists(key('order-bulk'))).toBe(true);
      for (const [index, label] of [
        [0, 'bulk-1'],
        [2, 'bulk-2'],
      ] as const) {
        await expect((await queues.retrieve(results[index].workflowId)).getResult(PROMPTLY)).resolves.toBe(key(label));
      }
      await queues.cancel(holder.workflowId);
    });

    it('gives one workflow to two concurrent transactions with the same key, and each caller its own outcome', async () => {
      const shared = key('two-tx');
      let releaseFirst!: () => void;
      const firstMayCommit = new Promise<void>((resolve) => (releaseFirst = resolve));
      let firstEnqueued!: () => void;
      const firstHasEnqueued = new Promise<void>((resolve) => (firstEnqueued = resolve));

      // Delayed, so that the winner still holds the key when the loser looks (no worker runs it meanwhile).
      const first = connected.transaction(async (tx) => {
        const handle = await queues.enqueue(QUEUE, tasks.record, [key('first')], {
          deduplicationId: shared,
          delayMs: AN_HOUR,
          db: tx.db,
        });
        await tx.insertOrder(key('order-first'));
        firstEnqueued();
        await firstMayCommit;
        return handle;
      });
      await Promise.race([firstHasEnqueued, first]);

      const second = connected.transaction(async (tx) => {
        const outcome = settle(
          queues.enqueue(QUEUE, tasks.record, [key('second')], { deduplicationId: shared, db: tx.db }),
        );
        await waitFor(async () => (await waitingInserts()) >= 1, {
          what: 'the second transaction to wait for the first',
        });
        releaseFirst();
        const { error } = await outcome;
        await tx.insertOrder(key('order-second'));
        return error;
      });

      const [winner, loserError] = await Promise.all([first, second]);
      expect(winner.created).toBe(true);
      expect(loserError).toBeInstanceOf(QueueDeduplicatedError);
      expect(loserError).toMatchObject({ deduplicationId: shared, existingWorkflowId: winner.workflowId });
      expect(await workflowIdsFor(shared)).toEqual([winner.workflowId]);
      expect(await orderExists(key('order-first'))).toBe(true);
      expect(await orderExists(key('order-second'))).toBe(true);
      await queues.cancel(winner.workflowId);
    });

    it("runs a statement with $n parameters (one used twice) and a literal '?' in the caller's transaction", async () => {
      const order = key('order-sql');
      const rows = await connected.transaction(async (tx) => {
        await tx.insertOrder(order);
        const result = await tx.db.executeSql(
          `SELECT $1::text || '?' AS with_mark, $1::text AS again, $2::int[] AS numbers,
                  EXISTS (SELECT 1 FROM "${schema}".orders WHERE id = $3) AS sees_uncommitted_order`,
          ['value', [1, null], order],
        );
        expect(await orderExists(order)).toBe(false);
        return result.rows;
      });
      expect(rows).toEqual([{ with_mark: 'value?', again: 'value', numbers: [1, null], sees_uncommitted_order: true }]);
    });

    it('refuses what is not a transaction', () => {
      expect(() => connected.from(connected.notATransaction())).toThrow(InvalidArgumentError);
    });
  },
);

describe('the db option', () => {
  const refused = async (promise: Promise<unknown>, field: string) => {
    const error = await promise.catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ field });
  };

  it('is refused together with manager, or without executeSql, before anything is written', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl(), poolSize: 1 }).initialize();
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await dataSource.transaction(async (manager) => {
        const db = fromPg(client);
        await refused(
          queues.enqueue(QUEUE, tasks.record, ['x'], { deduplicationId: 'db-refused', db, manager }),
          'options',
        );
        await refused(
          queues.enqueueMany(QUEUE, tasks.record, [{ args: ['x'], options: { deduplicationId: 'db-refused' } }], {
            db,
            manager,
          }),
          'items[0].options',
        );
        await refused(
          queues.enqueue(QUEUE, tasks.record, ['x'], {
            deduplicationId: 'db-refused',
            db: { query: () => undefined } as unknown as TransactionSql,
          }),
          'options.db',
        );
      });
      await client.query('COMMIT');
    } finally {
      client.release();
      await dataSource.destroy();
    }
    expect(await workflowIdsFor('db-refused')).toEqual([]);
  });
});
