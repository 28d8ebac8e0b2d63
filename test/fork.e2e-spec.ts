/**
 * Fork and rerun (issue 31, item 6): `fork(id, { fromStep, workflowId, version, onDuplicate })` starts a new
 * workflow whose recorded positions before the start position (steps, a child's handle, a received message, events
 * as they were there) are copied and not run again; ERROR, CANCELLED, SUCCESS and dead-lettered sources; the fork
 * takes the source's key under `onDuplicate`, obeys the queue's limits, names its source (`forkedFrom`), has a fresh
 * retry budget and a deterministic ID (a retried call returns the same fork). `forkMany(filter)` forks by filter.
 */
import { Injectable } from '@nestjs/common';
import {
  InvalidArgumentError,
  QueueDeduplicatedError,
  QueueService,
  Step,
  Workflow,
  WorkflowNotFoundError,
  recv,
  setEvent,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { QueueApp, useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

@Injectable()
class Pipeline {
  readonly calls: string[] = [];
  /** `<id>:<stage>` pairs that fail. */
  readonly failing = new Set<string>();

  constructor(private readonly queues: QueueService) {}

  @Step()
  async stage(n: number, id: string): Promise<string> {
    this.calls.push(`stage ${n} ${id}`);
    if (this.failing.has(`${id}:${n}`)) throw new Error(`stage ${n} of ${id} failed`);
    return `stage ${n} done`;
  }

  @Workflow()
  async part(id: string): Promise<string> {
    this.calls.push(`part ${id}`);
    return `part of ${id}`;
  }

  /** Positions: 0 setEvent, 1 stage 1, 2 a child, 3-4 recv, 5 setEvent, 6 stage 2, 7 setEvent. */
  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 10, jitter: false } })
  async process(id: string): Promise<Record<string, unknown>> {
    await setEvent('progress', 'started');
    const first = await this.stage(1, id);
    const child = await this.queues.enqueue('tasks', this.part, [id]);
    const input = await recv('input', { timeoutMs: Infinity });
    await setEvent('progress', 'received');
    const second = await this.stage(2, id);
    await setEvent('progress', 'done');
    return { first, second, input, child: child.workflowId };
  }
}

describe('fork and rerun', () => {
  const suite = useQueueApp('fork', { pollIntervalMs: 100 }, [Pipeline], { tasks: Pipeline });
  let pool: Pool;
  let app: QueueApp;
  let pipeline: Pipeline;

  const stepNames = async (workflowId: string) =>
    (
      await pool.query<{ step_index: number; step_name: string }>(
        `SELECT step_index, step_name FROM "${suite.schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
        [workflowId],
      )
    ).rows.map((row) => `${row.step_index} ${row.step_name}`);
  const childrenOf = async (workflowId: string) =>
    (
      await pool.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM "${suite.schema}".workflows WHERE parent_workflow_id = $1 ORDER BY workflow_id`,
        [workflowId],
      )
    ).rows.map((row) => row.workflow_id);
  const statusOf = async (workflowId: string) => (await (await app.queues.retrieve(workflowId)).getStatus()).status;

  /** A run that fails at stage 2 (both attempts), after its child and its message. */
  const failedRun = async (id: string) => {
    pipeline.failing.add(`${id}:2`);
    await app.queues.enqueue('tasks', pipeline.process, [id], { workflowId: id, deduplicationId: `key-${id}` });
    await waitFor(async () => (await statusOf(id)) === 'WAITING', { what: `${id} to wait for its input` });
    await app.queues.send(id, { from: 'the test' }, { topic: 'input' });
    await waitFor(async () => (await statusOf(id)) === 'ERROR', { what: `${id} to fail` });
    pipeline.failing.delete(`${id}:2`);
  };

  beforeAll(() => {
    ({ pool, app, tasks: pipeline } = suite);
  });

  it('forks a failed run from its failed step: what it recorded before is copied, not run again', async () => {
    await failedRun('s1');
    expect(pipeline.calls.filter((call) => call.endsWith(' s1'))).toEqual([
      'stage 1 s1',
      'part s1',
      'stage 2 s1',
      'stage 2 s1',
    ]);
    await app.queues.pauseQueue('tasks');
    const fork = await app.queues.fork('s1');
    expect(fork).toMatchObject({ workflowId: 's1-fork-6', created: true });
    // Queued in its paused queue (its limits apply), holding the source's key, with the records before position 6.
    expect(await fork.getStatus()).toMatchObject({
      status: 'ENQUEUED',
      forkedFrom: 's1',
      workflowName: 'Pipeline.process',
      version: 1,
      deduplicationId: 'key-s1',
      attempts: 0,
    });
    expect(await stepNames('s1-fork-6')).toEqual([
      '0 setEvent progress',
      '1 Pipeline.stage',
      '2 enqueue Pipeline.part',
      '3 recv deadline',
      '4 recv',
      '5 setEvent progress',
    ]);
    expect(await app.queues.getEvent('s1-fork-6', 'progress', { timeoutMs: 0 })).toBe('received');
    const duplicate = await app.queues
      .enqueue('tasks', pipeline.process, ['other'], { deduplicationId: 'key-s1' })
      .catch((error: unknown) => error);
    expect(duplicate).toMatchObject({ existingWorkflowId: 's1-fork-6' });

    await app.queues.resumeQueue('tasks');
    expect(await fork.getResult({ timeoutMs: 10_000 })).toEqual({
      first: 'stage 1 done',
      second: 'stage 2 done',
      input: { from: 'the test' },
      child: 's1-2',
    });
    expect(pipeline.calls.filter((call) => call.endsWith(' s1'))).toEqual([
      'stage 1 s1',
      'part s1',
      'stage 2 s1',
      'stage 2 s1',
      'stage 2 s1',
    ]);
    expect(await childrenOf('s1-fork-6')).toEqual([]);
    expect(await app.queues.getEvent('s1-fork-6', 'progress', { timeoutMs: 0 })).toBe('done');
    expect(await statusOf('s1')).toBe('ERROR');

    const again = await app.queues.fork('s1');
    expect(again).toMatchObject({ workflowId: 's1-fork-6', created: false });
    const forks = (await app.queues.list({ workflowName: 'Pipeline.process' })).filter((w) => w.forkedFrom === 's1');
    expect(forks).toHaveLength(1);
  });

  it('forks from a given position, runs again what follows, and gives the fork a fresh retry budget', async () => {
    await failedRun('s2');
    pipeline.failing.add('s2:2');
    const fork = await app.queues.fork('s2', { fromStep: 2 });
    expect(fork.workflowId).toBe('s2-fork-2');
    await waitFor(async () => (await statusOf('s2-fork-2')) === 'WAITING', { what: 'the fork to wait for input' });
    expect(await childrenOf('s2-fork-2')).toEqual(['s2-fork-2-2']);
    await app.queues.send('s2-fork-2', 'second input', { topic: 'input' });
    await waitFor(async () => (await statusOf('s2-fork-2')) === 'ERROR', { what: 'the fork to fail twice' });
    const failed = await pool.query(
      `SELECT failed_attempts, attempts FROM "${suite.schema}".workflows WHERE workflow_id = 's2-fork-2'`,
    );
    // Claimed three times (before its wait, after it, for its retry): both failures are its own budget's.
    expect(failed.rows[0]).toEqual({ failed_attempts: 2, attempts: 3 });
    pipeline.failing.delete('s2:2');
    const rerun = await app.queues.fork('s2-fork-2', { workflowId: 'rerun-of-s2' });
    expect(await rerun.getResult({ timeoutMs: 10_000 })).toMatchObject({ input: 'second input', child: 's2-fork-2-2' });
    expect((await rerun.getStatus()).forkedFrom).toBe('s2-fork-2');
    // Stage 1 (position 1) came before both start positions: it ran once, in the source.
    expect(pipeline.calls.filter((call) => call === 'stage 1 s2')).toHaveLength(1);
  });

  it('forks successful, cancelled and dead-lettered runs; refuses one that has not finished', async () => {
    await app.queues.enqueue('tasks', pipeline.process, ['ok'], { workflowId: 'ok' });
    await waitFor(async () => (await statusOf('ok')) === 'WAITING');
    await expect(app.queues.fork('ok')).rejects.toBeInstanceOf(InvalidArgumentError);
    await app.queues.send('ok', 'go', { topic: 'input' });
    await waitFor(async () => (await statusOf('ok')) === 'SUCCESS');
    const calls = pipeline.calls.length;
    const replay = await app.queues.fork('ok');
    expect(replay.workflowId).toBe('ok-fork-8');
    expect(await replay.getResult({ timeoutMs: 10_000 })).toMatchObject({ input: 'go', second: 'stage 2 done' });
    expect(pipeline.calls.length).toBe(calls);

    await app.queues.enqueue('tasks', pipeline.process, ['c'], { workflowId: 'cancelled', deduplicationId: 'key-c' });
    await waitFor(async () => (await statusOf('cancelled')) === 'WAITING');
    await app.queues.cancel('cancelled');
    const ofCancelled = await app.queues.fork('cancelled');
    // Its wait's deadline (position 3) was recorded; the recv itself (4) was not.
    expect(ofCancelled.workflowId).toBe('cancelled-fork-4');
    await app.queues.send('cancelled-fork-4', 'late input', { topic: 'input' });
    expect(await ofCancelled.getResult({ timeoutMs: 10_000 })).toMatchObject({ input: 'late input' });

    await app.queues.enqueue('tasks', pipeline.part, ['dead'], { workflowId: 'dead', deduplicationId: 'key-dead' });
    await waitFor(async () => (await statusOf('dead')) === 'SUCCESS');
    await pool.query(
      `WITH h AS (DELETE FROM "${suite.schema}".workflow_history WHERE workflow_id = 'dead' RETURNING *)
       INSERT INTO "${suite.schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, deduplication_id)
       SELECT workflow_id, queue_name, workflow_name, 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', inputs, deduplication_id FROM h`,
    );
    const ofDead = await app.queues.fork('dead');
    expect(await ofDead.getResult({ timeoutMs: 10_000 })).toBe('part of dead');

    await expect(app.queues.fork('nobody')).rejects.toBeInstanceOf(WorkflowNotFoundError);
    await expect(app.queues.fork('ok', { fromStep: -1 })).rejects.toThrow(/options.fromStep must be a position/);
    await expect(app.queues.fork('ok', { onDuplicate: 'replace' as never })).rejects.toThrow(/options.onDuplicate/);
  });

  it("takes the source's key under onDuplicate: refused while held, or superseding, or the holder returned", async () => {
    await failedRun('k');
    const holder = await app.queues.enqueue('tasks', pipeline.process, ['holder'], {
      workflowId: 'holder',
      deduplicationId: 'key-k',
    });
    const refused = await app.queues.fork('k').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(QueueDeduplicatedError);
    expect(refused).toMatchObject({ existingWorkflowId: 'holder', deduplicationId: 'key-k' });
    expect(await pool.query(`SELECT 1 FROM "${suite.schema}".workflows WHERE workflow_id = 'k-fork-6'`)).toMatchObject({
      rowCount: 0,
    });
    expect(await app.queues.fork('k', { onDuplicate: 'return-existing' })).toMatchObject({
      workflowId: 'holder',
      created: false,
    });
    const superseding = await app.queues.fork('k', { onDuplicate: 'supersede' });
    expect(superseding).toMatchObject({ workflowId: 'k-fork-6', created: true });
    await waitFor(async () => (await holder.getStatus()).status === 'CANCELLED', { what: 'the holder superseded' });
    expect(await superseding.getResult({ timeoutMs: 10_000 })).toMatchObject({ second: 'stage 2 done' });
  });

  it('records another version when asked', async () => {
    await failedRun('v');
    const fork = await app.queues.fork('v', { version: 7, workflowId: 'v-at-7' });
    expect(await fork.getStatus()).toMatchObject({ version: 7, status: 'ENQUEUED', forkedFrom: 'v' });
    expect((await app.queues.listVersions()).find((v) => v.version === 7)).toEqual({
      workflowName: 'Pipeline.process',
      version: 7,
      unfinished: 1,
      executors: 0,
    });
    await app.queues.cancel('v-at-7');
  });

  it('forks by filter, once: a retried call finds the forks it made', async () => {
    for (const id of ['m1', 'm2', 'm3']) await failedRun(id);
    await app.queues.enqueue('tasks', pipeline.process, ['busy'], { workflowId: 'm-busy', deduplicationId: 'key-m3' });
    await app.queues.enqueue('tasks', pipeline.process, ['w'], { workflowId: 'm-waiting' });
    await waitFor(async () => (await statusOf('m-waiting')) === 'WAITING');
    const filter = { workflowIds: ['m1', 'm2', 'm3', 'm-waiting'] };
    await app.queues.pauseQueue('tasks');
    expect(await app.queues.forkMany(filter)).toEqual([
      { workflowId: 'm1', outcome: 'forked', forkWorkflowId: 'm1-fork-6' },
      { workflowId: 'm2', outcome: 'forked', forkWorkflowId: 'm2-fork-6' },
      { workflowId: 'm3', outcome: 'key-held' },
      { workflowId: 'm-waiting', outcome: 'not-forkable' },
    ]);
    expect(await app.queues.forkMany({ ...filter, status: 'ERROR' })).toEqual([
      { workflowId: 'm1', outcome: 'existing', forkWorkflowId: 'm1-fork-6' },
      { workflowId: 'm2', outcome: 'existing', forkWorkflowId: 'm2-fork-6' },
      { workflowId: 'm3', outcome: 'key-held' },
    ]);
    expect(await stepNames('m2-fork-6')).toHaveLength(6);
    await app.queues.resumeQueue('tasks');
    for (const id of ['m1-fork-6', 'm2-fork-6']) {
      expect(await (await app.queues.retrieve(id)).getResult({ timeoutMs: 10_000 })).toMatchObject({
        second: 'stage 2 done',
      });
    }
    await expect(app.queues.forkMany(filter, { fromStep: 'first' as never })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(app.queues.forkMany({})).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
