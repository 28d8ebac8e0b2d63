import { Test, TestingModule } from '@nestjs/testing';
import { DatabaseUnavailableError, DedupQueueModule, QueueDeduplicatedError, QueueService } from 'nest-dedup-queue';
import type { EnqueueResult } from './fixtures/child-enqueuer';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { DoublingTasks } from './fixtures/doubling-tasks';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

const PER_PROCESS = 50;

/**
 * Guarantees on a Citus cluster (`distribution: 'citus'`): the deduplication race from several processes, and the
 * failure of one worker node: the queues it holds report `DatabaseUnavailableError` (SQLSTATE 08006 from the
 * coordinator) and resume when it is back; the queues on the other node keep running; nothing is lost or doubled.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: guarantees on the cluster', () => {
  const schema = uniqueSchema('citus_guarantees');
  const citus = useCitusCluster({ beforeClose: killFixtures });
  let module: TestingModule;
  let queues: QueueService;
  /** `queueOn[i]`: a queue whose shard lives on `citus.cluster.workers[i]`. */
  let queueOn: [string, string];

  beforeAll(async () => {
    // A first boot creates the tables, so that the queues' placement can be read.
    const names = Array.from({ length: 12 }, (_, n) => `queue-${n}`);
    module = citus.closeAfter(await boot(names.map((name) => ({ name }))));
    queueOn = [await queueOnWorker(names, 0), await queueOnWorker(names, 1)];
  });

  async function boot(declared: Array<{ name: string }>): Promise<TestingModule> {
    const booted = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          queues: [{ name: 'tasks' }, ...declared],
          pollIntervalMs: 200,
          retryAttempts: 0,
        }),
      ],
      providers: [DoublingTasks],
    }).compile();
    await booted.init();
    queues = booted.get(QueueService);
    return booted;
  }

  async function queueOnWorker(names: string[], index: number): Promise<string> {
    for (const name of names) {
      if ((await citus.cluster.workerIndexFor(`"${schema}".workflow_queue`, name)) === index) return name;
    }
    throw new Error(`no queue of ${names.join(', ')} lives on worker ${index}`);
  }

  const rowsOf = async (queue: string) =>
    (
      await citus.coordinator.query<{ workflow_id: string; status: string; output: unknown }>(
        `SELECT workflow_id, status, output FROM "${schema}".workflows WHERE queue_name = $1 ORDER BY workflow_id`,
        [queue],
      )
    ).rows;

  it(`creates exactly one workflow from ${2 * PER_PROCESS} concurrent enqueues with one key in two processes`, async () => {
    const children: FixtureProcess[] = ['a', 'b'].map((name) =>
      spawnFixture('child-enqueuer.ts', name, {
        SCHEMA: schema,
        CHILD_NAME: name,
        DATABASE_URL: citus.cluster.url,
        DISTRIBUTION: 'citus',
      }),
    );
    await Promise.all(children.map((child) => child.message('ready')));
    for (const child of children) child.send({ type: 'go', round: 1, deduplicationId: 'race', count: PER_PROCESS });
    const replies = await Promise.all(
      children.map((child) => child.message<{ type: 'results'; results: EnqueueResult[] }>('results', { round: 1 })),
    );
    const results = replies.flatMap((reply) => reply.results);
    expect(results.filter((result) => result.error !== undefined)).toEqual([]);
    const created = results.filter((result) => result.created !== undefined);
    expect(created).toHaveLength(1);
    const deduplicated = results.filter((result) => result.deduplicated !== undefined);
    expect(deduplicated).toHaveLength(2 * PER_PROCESS - 1);
    expect(new Set(deduplicated.map((result) => result.deduplicated))).toEqual(new Set([created[0].created]));
    const { rows } = await citus.coordinator.query(
      `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE deduplication_id = 'race'`,
    );
    expect(rows[0].n).toBe(1);
  }, 120_000);

  it('runs the other node’s queues to the end while a worker node is down, and the rest once it is back', async () => {
    const [down, up] = queueOn;
    const tasks = module.get(DoublingTasks);
    const before = await queues.enqueue(down, tasks.double, [1], { deduplicationId: 'before' });
    await expect(before.getResult({ timeoutMs: 20_000 })).resolves.toBe(2);

    const during: Array<Awaited<ReturnType<QueueService['enqueue']>>> = [];
    await citus.cluster.stopWorker(0);
    try {
      const error = await queues.enqueue(down, tasks.double, [2], { deduplicationId: 'during' }).catch((e) => e);
      expect(error).toBeInstanceOf(DatabaseUnavailableError);
      // A deduplication window keeps each key after its workflow ends (a key record, written on the healthy node too).
      const held = (n: number) => ({ deduplicationId: `up-${n}`, deduplicationWindowMs: 60_000 });
      for (let n = 0; n < 5; n++) during.push(await queues.enqueue(up, tasks.double, [n], held(n)));
      const refused = await queues.enqueue(up, tasks.double, [0], held(0)).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(QueueDeduplicatedError);
      // The refused call names the key's holder, read by key (every workflow ID of its batch generated).
      expect((refused as QueueDeduplicatedError).existingWorkflowId).toBe(during[0].workflowId);
      expect((refused as QueueDeduplicatedError).existingStatus).toBeDefined();
      // The healthy node's queue runs to the end while the other node is still down: its claims and its outcomes
      // are statements on its own node (a claim of the stopped node's queue failing holds only that queue's claims).
      const finished = async () => (await rowsOf(up)).filter((row) => row.status === 'SUCCESS').length === 5;
      await waitFor(finished, {
        what: 'the healthy node’s queue finished during the outage',
        timeoutMs: 20_000,
      });
      await expect(Promise.all(during.map((handle) => handle.getResult({ timeoutMs: 5_000 })))).resolves.toEqual([
        0, 2, 4, 6, 8,
      ]);
      const stillDown = await queues.enqueue(down, tasks.double, [2], { deduplicationId: 'during' }).catch((e) => e);
      expect(stillDown).toBeInstanceOf(DatabaseUnavailableError);
    } finally {
      await citus.cluster.startWorker(0);
    }

    const after = await waitFor(
      async () => queues.enqueue(down, tasks.double, [3], { deduplicationId: 'after' }).catch(() => undefined),
      { what: 'an enqueue into the stopped node’s queue once it is back', timeoutMs: 30_000 },
    );
    await expect(after.getResult({ timeoutMs: 20_000 })).resolves.toBe(6);
    await expect(Promise.all(during.map((handle) => handle.getResult({ timeoutMs: 30_000 })))).resolves.toEqual([
      0, 2, 4, 6, 8,
    ]);
    const downRows = await rowsOf(down);
    expect(downRows.map((row) => row.status)).toEqual(['SUCCESS', 'SUCCESS']);
    expect(downRows.map((row) => row.output).sort()).toEqual([2, 6]);
    const upRows = await rowsOf(up);
    expect(upRows).toHaveLength(5);
    expect(upRows.every((row) => row.status === 'SUCCESS')).toBe(true);
  }, 120_000);
});
