/**
 * Transactional enqueue: `enqueue(..., { manager })` and `enqueueMany(..., { manager })` with the EntityManager of
 * the caller's TypeORM transaction. Runs twice: with the module on its own connection (the caller's transactions
 * come from a separate DataSource) and with an application that shares its `@nestjs/typeorm` DataSource with the
 * module (`forRootAsync({ inject: [DataSource] })`), whose transactions then run on the module's own pool.
 * Each app runs a worker, so "visible to workers" is observed, not assumed.
 */
import { Injectable } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  DedupQueueModule,
  InvalidArgumentError,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { DataSource, EntityManager } from 'typeorm';
import { Gate } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';
import { activeTableLockWaits } from './support/lock-waits';

@Injectable()
class TxTasks {
  readonly ran: string[] = [];
  private readonly gates = new Map<string, Gate>();

  gate(label: string): Gate {
    let gate = this.gates.get(label);
    if (!gate) this.gates.set(label, (gate = new Gate()));
    return gate;
  }

  openAll(): void {
    for (const gate of this.gates.values()) gate.open();
  }

  @Workflow()
  async record(label: string): Promise<string> {
    this.ran.push(label);
    return label;
  }

  /** Runs until the test opens the gate named `label`. */
  @Workflow()
  async blocked(label: string): Promise<string> {
    this.ran.push(label);
    await this.gate(label).wait();
    return label;
  }
}

interface Setup {
  queues: QueueService;
  tasks: TxTasks;
  /** Where the caller's transactions come from. */
  dataSource: DataSource;
  close(): Promise<void>;
}

const variants: Array<[string, (schema: string) => Promise<Setup>]> = [
  [
    "the module's own connection, the caller's transaction from another DataSource",
    async (schema) => {
      const module = await Test.createTestingModule({
        imports: [
          DedupQueueModule.forRoot({
            connection: { url: databaseUrl(), poolSize: 4 },
            schema,
            queues: [{ name: 'tx' }],
            shutdownGraceMs: 1000,
          }),
        ],
        providers: [TxTasks],
      }).compile();
      await module.init();
      const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl(), poolSize: 3 }).initialize();
      return {
        queues: module.get(QueueService),
        tasks: module.get(TxTasks),
        dataSource,
        close: async () => {
          await module.close();
          await dataSource.destroy();
        },
      };
    },
  ],
  [
    "an application's @nestjs/typeorm DataSource shared with the module",
    async (schema) => {
      const module: TestingModule = await Test.createTestingModule({
        imports: [
          TypeOrmModule.forRoot({ type: 'postgres', url: databaseUrl(), poolSize: 6 }),
          DedupQueueModule.forRootAsync({
            inject: [DataSource],
            useFactory: (dataSource: DataSource) => ({
              dataSource,
              schema,
              queues: [{ name: 'tx' }],
              shutdownGraceMs: 1000,
            }),
          }),
        ],
        providers: [TxTasks],
      }).compile();
      await module.init();
      return {
        queues: module.get(QueueService),
        tasks: module.get(TxTasks),
        dataSource: module.get(DataSource),
        close: () => module.close(),
      };
    },
  ],
];

describe.each(variants)('transactional enqueue with %s', (_name, start) => {
  const schema = uniqueSchema('tx');
  const table = `"${schema}".workflows`;
  let pool: Pool;
  let setup: Setup;
  let queues: QueueService;
  let tasks: TxTasks;
  let dataSource: DataSource;

  beforeAll(async () => {
    pool = testPool();
    setup = await start(schema);
    ({ queues, tasks, dataSource } = setup);
    // The caller's own table, written in the same transactions as the enqueues.
    await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY)`);
  });

  afterAll(async () => {
    tasks?.openAll();
    await setup?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const rowsFor = async (key: string) =>
    (
      await pool.query(
        `SELECT workflow_id, status, active_deduplication_id FROM ${table} WHERE deduplication_id = $1 ORDER BY seq`,
        [key],
      )
    ).rows;
  const workflowExists = async (workflowId: string) =>
    (await pool.query(`SELECT 1 FROM ${table} WHERE workflow_id = $1`, [workflowId])).rowCount === 1;
  const orders = async (ids: string[]) =>
    (await pool.query(`SELECT id FROM "${schema}".orders WHERE id = ANY($1) ORDER BY id`, [ids])).rows.map(
      (row) => row.id,
    );
  const waitingInserts = () => activeTableLockWaits(pool, schema);
  /** Keeps a promise's outcome without an unhandled rejection while the test does other things. */
  const settle = <T>(promise: Promise<T>) =>
    promise.then(
      (value) => ({ value, error: undefined }),
      (error: unknown) => ({ value: undefined, error }),
    );

  it('leaves no workflow and no held key when the transaction rolls back', async () => {
    const key = 'rollback';
    let rolledBack = '';
    let bulkIds: string[] = [];
    let outside: Promise<{ value?: { workflowId: string; created: boolean }; error: unknown }> | undefined;

    const rollback = dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ('order-rolled-back')`);
      const handle = await queues.enqueue('tx', tasks.record, ['rolled-back'], { deduplicationId: key, manager });
      expect(handle.created).toBe(true);
      rolledBack = handle.workflowId;
      expect(
        await manager.query(`SELECT status, active_deduplication_id FROM ${table} WHERE workflow_id = $1`, [
          rolledBack,
        ]),
      ).toEqual([{ status: 'ENQUEUED', active_deduplication_id: key }]);
      const bulk = await queues.enqueueMany(
        'tx',
        tasks.record,
        [1, 2, 3].map((n) => ({ args: [`rolled-back-bulk-${n}`], options: { deduplicationId: `rollback-bulk-${n}` } })),
        { manager },
      );
      expect(bulk.map((result) => result.status)).toEqual(['created', 'created', 'created']);
      bulkIds = bulk.map((result) => result.workflowId);

      // An enqueue of the same key outside the transaction waits for it: the open transaction holds the key.
      outside = settle(queues.enqueue('tx', tasks.record, ['outside'], { deduplicationId: key }));
      await waitFor(async () => (await waitingInserts()) >= 1, {
        what: 'the outside enqueue to wait for the transaction',
      });
      throw new Error('the caller rolls back');
    });
    await expect(rollback).rejects.toThrow('the caller rolls back');

    // Rolled back: the waiting enqueue takes the key, nothing of the transaction exists.
    const waited = await outside!;
    expect(waited.error).toBeUndefined();
    expect(waited.value?.created).toBe(true);
    expect(waited.value?.workflowId).not.toBe(rolledBack);
    expect((await rowsFor(key)).map((row) => row.workflow_id)).toEqual([waited.value?.workflowId]);
    for (const workflowId of [rolledBack, ...bulkIds]) expect(await workflowExists(workflowId)).toBe(false);
    for (const n of [1, 2, 3]) {
      expect(await rowsFor(`rollback-bulk-${n}`)).toEqual([]);
      await expect(queues.findByDeduplicationId('tx', `rollback-bulk-${n}`)).resolves.toBeUndefined();
    }
    expect(await orders(['order-rolled-back'])).toEqual([]);
    await expect(queues.retrieve(waited.value!.workflowId).then((handle) => handle.getResult())).resolves.toBe(
      'outside',
    );
    const again = await queues.enqueue('tx', tasks.record, ['bulk key free'], { deduplicationId: 'rollback-bulk-1' });
    expect(again.created).toBe(true);
    await again.getResult();
    expect(tasks.ran.filter((label) => label.startsWith('rolled-back'))).toEqual([]);
  });

  it('makes a committed workflow visible to other connections and to workers only after the commit', async () => {
    let committed = '';
    await dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ('order-committed')`);
      const handle = await queues.enqueue('tx', tasks.record, ['committed'], { deduplicationId: 'commit', manager });
      expect(handle.created).toBe(true);
      committed = handle.workflowId;

      expect(await workflowExists(committed)).toBe(false);
      await expect(queues.findByDeduplicationId('tx', 'commit')).resolves.toBeUndefined();
      // A workflow enqueued after it (outside the transaction) runs; the worker's claim did not see this one.
      const probe = await queues.enqueue('tx', tasks.record, ['probe']);
      await expect(probe.getResult({ timeoutMs: 10_000 })).resolves.toBe('probe');
      expect(tasks.ran).not.toContain('committed');
      expect(await manager.query(`SELECT status FROM ${table} WHERE workflow_id = $1`, [committed])).toEqual([
        { status: 'ENQUEUED' },
      ]);
    });

    expect(await workflowExists(committed)).toBe(true);
    expect(await orders(['order-committed'])).toEqual(['order-committed']);
    const handle = await queues.retrieve<string>(committed);
    await expect(handle.getResult({ timeoutMs: 10_000 })).resolves.toBe('committed');
    expect(tasks.ran.filter((label) => label === 'committed')).toHaveLength(1);
  });

  it('raises QueueDeduplicatedError for a duplicate without aborting the caller’s transaction', async () => {
    const holder = await queues.enqueue('tx', tasks.record, ['held'], {
      deduplicationId: 'dup-held',
      delayMs: 3_600_000,
    });
    let takenInside = '';
    let bulkCreated = '';

    await dataSource.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ('order-before')`);

      const error = await queues
        .enqueue('tx', tasks.record, ['dup'], { deduplicationId: 'dup-held', manager })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(QueueDeduplicatedError);
      expect(error).toMatchObject({
        queueName: 'tx',
        deduplicationId: 'dup-held',
        existingWorkflowId: holder.workflowId,
      });

      const existing = await queues.enqueue('tx', tasks.record, ['dup'], {
        deduplicationId: 'dup-held',
        onDuplicate: 'return-existing',
        manager,
      });
      expect({ workflowId: existing.workflowId, created: existing.created }).toEqual({
        workflowId: holder.workflowId,
        created: false,
      });

      // A key taken earlier in the same transaction is held for the rest of it.
      const inside = await queues.enqueue('tx', tasks.record, ['inside-1'], { deduplicationId: 'dup-inside', manager });
      takenInside = inside.workflowId;
      await expect(
        queues.enqueue('tx', tasks.record, ['inside-2'], { deduplicationId: 'dup-inside', manager }),
      ).rejects.toMatchObject({
        name: 'QueueDeduplicatedError',
        existingWorkflowId: takenInside,
      });

      const bulk = await queues.enqueueMany(
        'tx',
        tasks.record,
        [
          { args: ['bulk-dup'], options: { deduplicationId: 'dup-held' } },
          { args: ['bulk-new'], options: { deduplicationId: 'dup-bulk' } },
          { args: ['bulk-dup-inside'], options: { deduplicationId: 'dup-inside' } },
        ],
        { manager },
      );
      expect(bulk).toEqual([
        { status: 'duplicate', workflowId: holder.workflowId },
        { status: 'created', workflowId: expect.any(String) },
        { status: 'duplicate', workflowId: takenInside },
      ]);
      bulkCreated = bulk[1].workflowId;

      // The transaction is still usable after the duplicates.
      await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ('order-after')`);
    });

    expect(await orders(['order-after', 'order-before'])).toEqual(['order-after', 'order-before']);
    expect((await rowsFor('dup-held')).map((row) => row.workflow_id)).toEqual([holder.workflowId]);
    expect((await rowsFor('dup-inside')).map((row) => row.workflow_id)).toEqual([takenInside]);
    expect((await rowsFor('dup-bulk')).map((row) => row.workflow_id)).toEqual([bulkCreated]);
    await expect((await queues.retrieve(takenInside)).getResult({ timeoutMs: 10_000 })).resolves.toBe('inside-1');
    await expect((await queues.retrieve(bulkCreated)).getResult({ timeoutMs: 10_000 })).resolves.toBe('bulk-new');
    await queues.cancel(holder.workflowId);
  });

  it('waits for another open transaction that holds the key, then rejects without aborting this one', async () => {
    let first = '';
    let releaseFirst!: () => void;
    const firstMayCommit = new Promise<void>((resolve) => (releaseFirst = resolve));
    let firstEnqueued!: () => void;
    const firstHasEnqueued = new Promise<void>((resolve) => (firstEnqueued = resolve));

    const firstTransaction = dataSource.transaction(async (manager) => {
      // Delayed, so that it still holds the key when the second transaction looks (no worker runs it meanwhile).
      first = (
        await queues.enqueue('tx', tasks.record, ['first'], { deduplicationId: 'two-tx', delayMs: 3_600_000, manager })
      ).workflowId;
      firstEnqueued();
      await firstMayCommit;
    });
    await firstHasEnqueued;

    const secondTransaction = dataSource.transaction(async (manager) => {
      const second = settle(queues.enqueue('tx', tasks.record, ['second'], { deduplicationId: 'two-tx', manager }));
      await waitFor(async () => (await waitingInserts()) >= 1, {
        what: 'the second transaction to wait for the first',
      });
      releaseFirst();
      const { error } = await second;
      expect(error).toBeInstanceOf(QueueDeduplicatedError);
      expect(error).toMatchObject({ existingWorkflowId: first });
      await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ('order-second')`);
    });
    await Promise.all([firstTransaction, secondTransaction]);

    expect(await orders(['order-second'])).toEqual(['order-second']);
    expect(await rowsFor('two-tx')).toEqual([
      { workflow_id: first, status: 'ENQUEUED', active_deduplication_id: 'two-tx' },
    ]);
    await queues.cancel(first);
  });

  it('undoes a replace of a queued holder when the transaction rolls back', async () => {
    const holder = await queues.enqueue('tx', tasks.record, ['original'], {
      deduplicationId: 'replace-rollback',
      delayMs: 3_600_000,
    });
    const inputs = async () =>
      (await pool.query(`SELECT inputs::text AS inputs FROM ${table} WHERE workflow_id = $1`, [holder.workflowId]))
        .rows[0].inputs;
    await expect(
      dataSource.transaction(async (manager) => {
        const replaced = await queues.enqueue('tx', tasks.record, ['replacement'], {
          deduplicationId: 'replace-rollback',
          onDuplicate: 'replace',
          manager,
        });
        expect({ workflowId: replaced.workflowId, created: replaced.created }).toEqual({
          workflowId: holder.workflowId,
          created: false,
        });
        expect(
          await manager.query(`SELECT inputs::text AS inputs FROM ${table} WHERE workflow_id = $1`, [
            holder.workflowId,
          ]),
        ).toEqual([{ inputs: '["replacement"]' }]);
        expect(await inputs()).toBe('["original"]');
        throw new Error('roll back the replace');
      }),
    ).rejects.toThrow('roll back the replace');
    expect(await inputs()).toBe('["original"]');
    await queues.cancel(holder.workflowId);
  });

  it("queues the follow-up of a running holder ('replace' + 'queue-next') inside the transaction", async () => {
    const key = 'tx-next';
    const holder = await queues.enqueue('tx', tasks.blocked, ['tx-next-holder'], { deduplicationId: key });
    await waitFor(() => tasks.ran.includes('tx-next-holder'), { what: 'the holder to run' });
    let followUp: { workflowId: string; created: boolean } | undefined;
    await dataSource.transaction(async (manager) => {
      const handle = await queues.enqueue('tx', tasks.blocked, ['tx-next-follow-up'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        whenRunning: 'queue-next',
        manager,
      });
      followUp = { workflowId: handle.workflowId, created: handle.created };
      expect(await workflowExists(String(handle.workflowId))).toBe(false);
    });

    expect(followUp).toEqual({ workflowId: expect.any(String), created: true });
    const rows = (
      await pool.query(
        `SELECT workflow_id, status, next_deduplication_id FROM ${table} WHERE deduplication_id = $1 ORDER BY seq`,
        [key],
      )
    ).rows;
    expect(rows).toEqual([
      { workflow_id: holder.workflowId, status: 'PENDING', next_deduplication_id: null },
      { workflow_id: followUp?.workflowId, status: 'ENQUEUED', next_deduplication_id: key },
    ]);
    tasks.gate('tx-next-follow-up').open();
    tasks.gate('tx-next-holder').open();
    await expect(holder.getResult({ timeoutMs: 10_000 })).resolves.toBe('tx-next-holder');
    await expect((await queues.retrieve(followUp!.workflowId)).getResult({ timeoutMs: 10_000 })).resolves.toBe(
      'tx-next-follow-up',
    );
  });

  it('hands the key to a follow-up whose transaction commits while the holder is ending (its end waited for it)', async () => {
    const key = 'tx-next-race';
    const holder = await queues.enqueue('tx', tasks.blocked, ['tx-race-holder'], { deduplicationId: key });
    await waitFor(() => tasks.ran.includes('tx-race-holder'), { what: 'the holder to run' });
    let followUpId = '';
    await dataSource.transaction(async (manager) => {
      const handle = await queues.enqueue('tx', tasks.blocked, ['tx-race-follow-up'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        whenRunning: 'queue-next',
        manager,
      });
      followUpId = handle.workflowId;
      // The holder ends now: its outcome statement begins and waits for the follow-up's lock on the holder's row.
      tasks.gate('tx-race-holder').open();
      await waitFor(async () => (await waitingInserts()) > 0, { what: "the holder's end to wait for the lock" });
    });

    await expect(holder.getResult({ timeoutMs: 10_000 })).resolves.toBe('tx-race-holder');
    await waitFor(() => tasks.ran.includes('tx-race-follow-up'), {
      what: 'the follow-up to take the key and run',
      timeoutMs: 15_000,
    });
    const { rows } = await pool.query(
      `SELECT status, active_deduplication_id, next_deduplication_id FROM ${table} WHERE workflow_id = $1`,
      [followUpId],
    );
    expect(rows).toEqual([{ status: 'PENDING', active_deduplication_id: key, next_deduplication_id: null }]);
    tasks.gate('tx-race-follow-up').open();
    await expect((await queues.retrieve(followUpId)).getResult({ timeoutMs: 10_000 })).resolves.toBe(
      'tx-race-follow-up',
    );
  });

  it.each(['REPEATABLE READ', 'SERIALIZABLE'] as const)(
    'raises QueueDeduplicatedError in a %s transaction for a key taken after its snapshot, without aborting it',
    async (isolation) => {
      const key = `snapshot-${isolation.replace(' ', '-').toLowerCase()}`;
      let holder = '';
      let outcome: unknown;
      await dataSource.transaction(isolation, async (manager) => {
        await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [`${key}-before`]); // takes the snapshot
        holder = (await queues.enqueue('tx', tasks.record, ['holder'], { deduplicationId: key, delayMs: 3_600_000 }))
          .workflowId;
        outcome = await queues
          .enqueue('tx', tasks.record, ['inside'], { deduplicationId: key, manager })
          .catch((caught: unknown) => caught);
        if (!(outcome instanceof QueueDeduplicatedError)) return;
        await manager.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [`${key}-after`]);
      });
      expect(outcome).toBeInstanceOf(QueueDeduplicatedError);
      expect(outcome).toMatchObject({ deduplicationId: key, existingWorkflowId: holder });
      expect(await orders([`${key}-after`, `${key}-before`])).toEqual([`${key}-after`, `${key}-before`]);
      expect((await rowsFor(key)).map((row) => row.workflow_id)).toEqual([holder]);
      await queues.cancel(holder);
    },
  );

  it('refuses a manager that is not in a running transaction, before writing anything', async () => {
    const refused = async (promise: Promise<unknown>, field: string) => {
      const error = await promise.catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ field });
    };
    await refused(
      queues.enqueue('tx', tasks.record, ['x'], { deduplicationId: 'no-tx', manager: dataSource.manager }),
      'options.manager',
    );

    const runner = dataSource.createQueryRunner();
    try {
      await refused(
        queues.enqueue('tx', tasks.record, ['x'], { deduplicationId: 'no-tx', manager: runner.manager }),
        'options.manager',
      );
    } finally {
      await runner.release();
    }

    let finished: EntityManager | undefined;
    await dataSource.transaction(async (manager) => {
      finished = manager;
    });
    await refused(
      queues.enqueue('tx', tasks.record, ['x'], { deduplicationId: 'no-tx', manager: finished }),
      'options.manager',
    );

    await refused(
      queues.enqueueMany('tx', tasks.record, [{ args: ['x'], options: { deduplicationId: 'no-tx' } }], {
        manager: dataSource.manager,
      }),
      'items[0].options.manager',
    );
    expect(await rowsFor('no-tx')).toEqual([]);
  });
});
