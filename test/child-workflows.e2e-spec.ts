import { Test } from '@nestjs/testing';
import { createHash } from 'node:crypto';
import {
  ChildKeyHeldByParentError,
  DedupQueueDashboardModule,
  DedupQueueModule,
  QueueService,
  WorkflowStatusInfo,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { COMPOSE_SUITE, ComposeTasks } from './fixtures/child-compose-tasks';
import { databaseUrl } from './support/database';
import { useWorkerSuite } from './support/worker-suite';
import { waitFor } from './support/wait-for';

/**
 * Child workflows (docs/composing-workflows.md) with real worker processes (child-compose-worker.ts), SIGKILLed and
 * restarted under the same executor ID, on a real Postgres. The test's own app enqueues and cancels; it never runs
 * a workflow. Includes ports of DBOS Transact's queue tests of children (tests/wfqueue.test.ts: child workflows
 * on a queue, recovery of a parent with queued children) and of deduplication inside a parent.
 */
describe('child workflows', () => {
  const suite = useWorkerSuite({ prefix: 'children', ...COMPOSE_SUITE });
  const { schema, release, startWorker, sigkill } = suite;
  let pool: Pool;
  let queues: QueueService;
  let tasks: ComposeTasks;

  beforeAll(() => {
    ({ pool, tasks } = suite);
    queues = suite.app.queues;
  });

  const childrenOf = async (parentWorkflowId: string) =>
    (
      await pool.query<{ workflow_id: string; status: string; deduplication_id: string | null }>(
        `SELECT workflow_id, status, deduplication_id FROM "${schema}".workflows
         WHERE parent_workflow_id = $1 ORDER BY created_at, workflow_id`,
        [parentWorkflowId],
      )
    ).rows;

  const marks = async (key: string, kind: string, notOf?: string) =>
    (
      await pool.query<{ workflow_id: string; attempt: number }>(
        `SELECT workflow_id, attempt FROM "${schema}".marks
         WHERE key = $1 AND kind = $2 AND workflow_id IS DISTINCT FROM $3 ORDER BY seq`,
        [key, kind, notOf ?? null],
      )
    ).rows;

  const statusOf = async (workflowId: string): Promise<WorkflowStatusInfo> =>
    (await queues.retrieve(workflowId)).getStatus();

  it('recovers a SIGKILLed parent with the same child and the same refusal, and one child row', async () => {
    const key = 'keyed';
    const first = await startWorker('keyed-worker');
    const parent = await queues.enqueue('parents', tasks.keyedParent, [key]);
    await first.message('mark', { key, kind: 'enqueued' });
    await sigkill(first);

    const childId = `${parent.workflowId}-0`;
    expect(await childrenOf(parent.workflowId)).toEqual([
      { workflow_id: childId, status: 'PENDING', deduplication_id: key },
    ]);
    // The child's key is freed: an enqueue that was not recorded would now create a second child, and succeed.
    await expect(queues.cancel(childId)).resolves.toBe('CANCELLED');

    const second = await startWorker('keyed-worker');
    await second.message('mark', { key, kind: 'enqueued', workflowId: parent.workflowId, attempt: 2 });
    await release(`${key}-parent`);
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toEqual({
      childId,
      created: true,
      refused: { name: 'QueueDeduplicatedError', existingWorkflowId: childId },
      child: 'WorkflowCancelledError',
    });
    expect(await childrenOf(parent.workflowId)).toEqual([
      { workflow_id: childId, status: 'CANCELLED', deduplication_id: key },
    ]);
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows WHERE deduplication_id = $1`, [key]))
        .rows[0].n,
    ).toBe(1);
    expect((await marks(key, 'started', childId)).map((mark) => mark.attempt)).toEqual([1, 2]);
    expect(await statusOf(childId)).toMatchObject({ parentWorkflowId: parent.workflowId, queueName: 'children' });
    expect(await statusOf(parent.workflowId)).toMatchObject({ parentWorkflowId: null, status: 'SUCCESS' });
  });

  it('finds the same child when the parent died between inserting it and recording it (derived child ID)', async () => {
    const key = 'unrecorded';
    const first = await startWorker('unrecorded-worker');
    const parent = await queues.enqueue('parents', tasks.keyedParent, [key]);
    await first.message('mark', { key, kind: 'enqueued' });
    await sigkill(first);
    // As if the process had died right after the inserts: the parent's records of both enqueues are gone.
    const removed = await pool.query(`DELETE FROM "${schema}".steps WHERE workflow_id = $1`, [parent.workflowId]);
    expect(removed.rowCount).toBe(2);

    await startWorker('unrecorded-worker');
    const childId = `${parent.workflowId}-0`;
    await waitFor(async () => (await marks(key, 'enqueued', childId)).length === 2, { what: 'the re-execution' });
    await release(key);
    await release(`${key}-parent`);
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toEqual({
      childId,
      created: true,
      refused: { name: 'QueueDeduplicatedError', existingWorkflowId: childId },
      child: 7,
    });
    expect((await childrenOf(parent.workflowId)).map((child) => child.workflow_id)).toEqual([childId]);
  });

  it('records getResult awaited in a workflow: re-executed, the parent gets the result without reading it again', async () => {
    const key = 'awaited';
    const first = await startWorker('awaiting-worker');
    const parent = await queues.enqueue('parents', tasks.awaitingParent, [key]);
    await first.message('mark', { key, kind: 'got-result' });
    await sigkill(first);
    const [child] = await childrenOf(parent.workflowId);
    expect(child).toMatchObject({ workflow_id: `${parent.workflowId}-0`, status: 'SUCCESS' });
    // Without its record, a second getResult would now find no workflow.
    await pool.query(`DELETE FROM "${schema}".workflow_history WHERE workflow_id = $1`, [child.workflow_id]);

    await startWorker('awaiting-worker');
    await release(`${key}-parent`);
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toBe(`${key}d`);
    expect((await marks(key, 'got-result')).map((mark) => mark.attempt)).toEqual([1, 2]);
  });

  it('recovers a parent with queued children: each child once, the results in order (DBOS test-queue-recovery)', async () => {
    const key = 'fan-out';
    const first = await startWorker('fan-out-worker');
    const parent = await queues.enqueue('parents', tasks.fanOutParent, [key, 5]);
    await waitFor(async () => (await marks(key, 'started', parent.workflowId)).length === 5, {
      what: 'the five children to start',
    });
    await sigkill(first);

    await startWorker('fan-out-worker');
    await waitFor(async () => (await marks(key, 'started', parent.workflowId)).length === 10, {
      what: 'the five children to start again after the recovery',
    });
    await release(key);
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toEqual([0, 1, 2, 3, 4]);
    const children = await childrenOf(parent.workflowId);
    expect(children.map((child) => child.workflow_id).sort()).toEqual(
      [0, 1, 2, 3, 4].map((position) => `${parent.workflowId}-${position}`).sort(),
    );
    expect(children.every((child) => child.status === 'SUCCESS')).toBe(true);
    expect((await marks(key, 'started', parent.workflowId)).length).toBe(10);
  });

  it('runs children enqueued from a workflow into another queue (DBOS child-wfs-queue)', async () => {
    await startWorker('children-worker');
    const parent = await queues.enqueue('parents', tasks.childWorkflowsParent, ['a', 'b']);
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toBe('adbdadbd');
    const children = await childrenOf(parent.workflowId);
    expect(children).toHaveLength(4);
    for (const child of children) {
      expect(await statusOf(child.workflow_id)).toMatchObject({
        parentWorkflowId: parent.workflowId,
        queueName: 'children',
        workflowName: 'ComposeTasks.quickChild',
        status: 'SUCCESS',
      });
    }
  });

  it('deduplicates children across parents: the second is refused by the first child, the key is free after it', async () => {
    const key = 'dedup-child';
    await startWorker('dedup-worker');
    const first = await queues.enqueue('parents', tasks.dedupParent, [key]);
    const { childId } = await first.getResult({ timeoutMs: 20_000 });
    expect(childId).toBe(`${first.workflowId}-0`);
    const second = await queues.enqueue('parents', tasks.dedupParent, [key]);
    await expect(second.getResult({ timeoutMs: 20_000 })).resolves.toEqual({
      refused: { name: 'QueueDeduplicatedError', existingWorkflowId: childId },
    });
    expect(await childrenOf(second.workflowId)).toEqual([]);

    await release(key);
    await expect((await queues.retrieve(childId as string)).getResult({ timeoutMs: 20_000 })).resolves.toBe(1);
    const third = await queues.enqueue('parents', tasks.dedupParent, [key]);
    await expect(third.getResult({ timeoutMs: 20_000 })).resolves.toEqual({ childId: `${third.workflowId}-0` });
  });

  it('records a batch enqueued from a workflow at one position, with derived IDs and the refused duplicate', async () => {
    await startWorker('batch-worker');
    const parent = await queues.enqueue('parents', tasks.batchParent, ['batch']);
    const id = (item: number) => `${parent.workflowId}-0-${item}`;
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toEqual([
      { status: 'created', workflowId: id(0) },
      { status: 'created', workflowId: id(1) },
      { status: 'duplicate', workflowId: id(1) },
    ]);
    expect((await childrenOf(parent.workflowId)).map((child) => child.workflow_id).sort()).toEqual([id(0), id(1)]);
  });

  it('cancels a parent alone, or with its unfinished children but never a holder it only joined', async () => {
    const worker = await startWorker('cancel-worker');
    const holder = await queues.enqueue('children', tasks.blockingChild, ['shared-holder', 0], {
      deduplicationId: 'shared',
    });
    const childrenReported = async (key: string, parentId: string) => {
      const message = await worker.message('mark', { key, workflowId: parentId });
      return JSON.parse(String(message.kind).replace(/^children:/, '')) as { ids: string[]; joinedCreated: boolean };
    };

    const alone = await queues.enqueue('parents', tasks.joiningParent, ['alone', 'shared']);
    const aloneChildren = await childrenReported('alone', alone.workflowId);
    expect(aloneChildren).toEqual({
      ids: [`${alone.workflowId}-0`, `${alone.workflowId}-1`, holder.workflowId],
      joinedCreated: false,
    });
    await expect(queues.cancel(alone.workflowId)).resolves.toBe('CANCELLED');
    for (const id of aloneChildren.ids) {
      expect(['ENQUEUED', 'PENDING']).toContain((await statusOf(id)).status);
    }

    const withChildren = await queues.enqueue('parents', tasks.joiningParent, ['with', 'shared']);
    const { ids } = await childrenReported('with', withChildren.workflowId);
    await expect(queues.cancel(withChildren.workflowId, { cancelChildren: true })).resolves.toBe('CANCELLED');
    expect((await statusOf(ids[0])).status).toBe('CANCELLED');
    expect((await statusOf(ids[1])).status).toBe('CANCELLED');
    expect(ids[2]).toBe(holder.workflowId);
    expect(['ENQUEUED', 'PENDING']).toContain((await statusOf(holder.workflowId)).status);
    expect((await statusOf(aloneChildren.ids[0])).status).not.toBe('CANCELLED');
  });

  it("refuses a child that needs its parent's own key in the parent's queue, writing nothing", async () => {
    await startWorker('own-key-worker');
    const parent = await queues.enqueue('parents', tasks.ownKeyParent, ['own'], { deduplicationId: 'own' });
    await expect(parent.getResult({ timeoutMs: 20_000 })).resolves.toEqual({
      name: ChildKeyHeldByParentError.name,
      parentWorkflowId: parent.workflowId,
      queueName: 'parents',
      deduplicationId: 'own',
    });
    expect(await childrenOf(parent.workflowId)).toEqual([]);
  });

  it("shows the tree in the dashboard: a parent's children, a child's parent", async () => {
    await startWorker('dashboard-worker');
    const parent = await queues.enqueue('parents', tasks.childWorkflowsParent, ['x', 'y']);
    await parent.getResult({ timeoutMs: 20_000 });
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl(), poolSize: 2 },
          schema,
          queues: [{ name: 'parents' }, { name: 'children' }],
          worker: false,
        }),
        DedupQueueDashboardModule.forRoot(),
      ],
    }).compile();
    const http = module.createNestApplication({ logger: false });
    await http.init();
    try {
      const { body: parentPage } = await request(http.getHttpServer())
        .get(`/queues/api/workflows/${parent.workflowId}`)
        .expect(200);
      // Positions 0 and 1 enqueue, 2 and 3 await their results, and so on.
      const positions = [0, 1, 4, 5];
      const childIds = positions.map((position) => `${parent.workflowId}-${position}`);
      expect(parentPage).toMatchObject({ parentWorkflowId: null });
      expect(parentPage.children).toEqual(
        positions.map((stepIndex) => ({ workflowId: `${parent.workflowId}-${stepIndex}`, stepIndex })),
      );
      const { body: childPage } = await request(http.getHttpServer())
        .get(`/queues/api/workflows/${childIds[0]}`)
        .expect(200);
      expect(childPage).toMatchObject({ parentWorkflowId: parent.workflowId, children: [] });
    } finally {
      await http.close();
    }
  });

  it("derives a child's ID from a parent's ID too long to extend by hashing it", async () => {
    await startWorker('long-id-worker');
    const parentId = 'p'.repeat(254);
    const parent = await queues.enqueue('parents', tasks.dedupParent, ['long-id'], { workflowId: parentId });
    const { childId } = await parent.getResult({ timeoutMs: 20_000 });
    expect(childId).toBe(`${createHash('sha256').update(parentId).digest('hex')}-0`);
    expect(await statusOf(childId as string)).toMatchObject({ parentWorkflowId: parentId });
    await release('long-id');
  });

  it('keeps enqueue outside a workflow as it was: no parent, a generated ID', async () => {
    const handle = await queues.enqueue('children', tasks.quickChild, ['outside']);
    expect(await handle.getStatus()).toMatchObject({ parentWorkflowId: null, status: 'ENQUEUED' });
    expect(handle.workflowId).toMatch(/^[0-9a-f-]{36}$/);
  });
});
