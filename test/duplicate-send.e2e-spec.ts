/**
 * `onDuplicate: 'send'` in one process against a real Postgres: a free key starts a workflow; a held key delivers
 * the duplicate's arguments to the holder (queued, running, or waiting in `recv`) as a message on `DUPLICATE_TOPIC`
 * and returns the holder's handle; what a holder ends without receiving starts the next workflow of the key (with
 * the first such message's arguments) and the rest go to it; a holder within its deduplication window refuses
 * (`QueueDeduplicatedError`); `requireSameArgs` still compares. The race from two processes is in
 * duplicate-send-race.e2e-spec.ts.
 */
import { Injectable } from '@nestjs/common';
import {
  DUPLICATE_TOPIC,
  DeduplicationEvent,
  DeduplicationMismatchError,
  QueueDeduplicatedError,
  Workflow,
  fromPg,
  recv,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { GatedRuns } from './fixtures/recording-tasks';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { activeTableLockWaits } from './support/lock-waits';

@Injectable()
class InboxTasks extends GatedRuns<{ label: string; workflowId: string }> {
  /** What each workflow received on `DUPLICATE_TOPIC`, by workflow ID. */
  readonly received = new Map<string, string[]>();

  /** Waits for its gate, then receives every duplicate already sent (none left when it returns). */
  @Workflow()
  async drainAfterGate(label: string): Promise<string[]> {
    const { workflowId } = workflowContext();
    this.runs.push({ label, workflowId });
    await this.gate(label).wait();
    const got: string[] = [];
    for (let args = await this.next(0); args; args = await this.next(0)) got.push(args[0]);
    this.received.set(workflowId, got);
    return got;
  }

  /** Waits in `recv` for one duplicate (up to 10 s), then returns its first argument. */
  @Workflow()
  async awaitOne(label: string): Promise<string | undefined> {
    const { workflowId } = workflowContext();
    this.runs.push({ label, workflowId });
    const args = await this.next(10_000);
    this.received.set(workflowId, args ? [args[0]] : []);
    return args?.[0];
  }

  /** Never receives: returns when its gate opens. */
  @Workflow()
  async ignore(label: string): Promise<string> {
    const { workflowId } = workflowContext();
    this.runs.push({ label, workflowId });
    await this.gate(label).wait();
    return label;
  }

  private next(timeoutMs: number): Promise<string[] | undefined> {
    return recv<string[]>(DUPLICATE_TOPIC, { timeoutMs });
  }
}

const schema = uniqueSchema('dup_send');
const view = `"${schema}".workflows`;
let pool: Pool;
let app: QueueApp;
let tasks: InboxTasks;
const events: DeduplicationEvent[] = [];

beforeAll(async () => {
  pool = testPool();
  app = await startQueueApp(
    { schema, queues: [{ name: 'inbox', workerConcurrency: 10 }], heartbeatIntervalMs: 200, leaseMs: 2000 },
    [InboxTasks],
  );
  tasks = app.get(InboxTasks);
  app.queues.onDeduplicated((event) => events.push(event));
});

afterAll(async () => {
  tasks?.openAll();
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

async function rowsOfKey(key: string): Promise<Array<{ workflow_id: string; status: string; inputs: unknown }>> {
  const { rows } = await pool.query(
    `SELECT workflow_id, status, inputs FROM ${view} WHERE queue_name = 'inbox' AND deduplication_id = $1 ORDER BY seq`,
    [key],
  );
  return rows;
}

it('starts a workflow when the key is free, and delivers a duplicate to a running holder, which receives it', async () => {
  const first = await app.queues.enqueue('inbox', tasks.drainAfterGate, ['s1-first'], {
    deduplicationId: 'send-1',
    onDuplicate: 'send',
  });
  expect(first.created).toBe(true);
  await waitFor(() => tasks.ran('s1-first').length === 1, { what: 'the holder to run' });

  const duplicates = await Promise.all(
    ['s1-a', 's1-b', 's1-c'].map((label) =>
      app.queues.enqueue('inbox', tasks.drainAfterGate, [label], { deduplicationId: 'send-1', onDuplicate: 'send' }),
    ),
  );
  expect(duplicates.map((handle) => [handle.workflowId, handle.created])).toEqual(
    Array(3).fill([first.workflowId, false]),
  );
  expect(events.filter((event) => event.deduplicationId === 'send-1')).toEqual(
    Array(3).fill({
      queueName: 'inbox',
      deduplicationId: 'send-1',
      existingWorkflowId: first.workflowId,
      outcome: 'sent',
    }),
  );

  tasks.gate('s1-first').open();
  expect((await first.getResult({ timeoutMs: 10_000 })).sort()).toEqual(['s1-a', 's1-b', 's1-c']);
  expect(await rowsOfKey('send-1')).toEqual([
    { workflow_id: first.workflowId, status: 'SUCCESS', inputs: ['s1-first'] },
  ]);
});

it('wakes a holder that waits (WAITING) in recv', async () => {
  const holder = await app.queues.enqueue('inbox', tasks.awaitOne, ['s2-holder'], {
    deduplicationId: 'send-2',
    onDuplicate: 'send',
  });
  await waitFor(async () => (await holder.getStatus())?.status === 'WAITING', {
    what: 'the holder to wait in recv',
    timeoutMs: 15_000,
  });
  const duplicate = await app.queues.enqueue('inbox', tasks.awaitOne, ['s2-late'], {
    deduplicationId: 'send-2',
    onDuplicate: 'send',
  });
  expect(duplicate).toMatchObject({ workflowId: holder.workflowId, created: false });
  await expect(holder.getResult({ timeoutMs: 10_000 })).resolves.toBe('s2-late');
  expect(await rowsOfKey('send-2')).toHaveLength(1);
});

it('delivers to a holder that has not started yet', async () => {
  const holder = await app.queues.enqueue('inbox', tasks.drainAfterGate, ['s3-holder'], {
    deduplicationId: 'send-3',
    onDuplicate: 'send',
    delayMs: 300,
  });
  const duplicate = await app.queues.enqueue('inbox', tasks.drainAfterGate, ['s3-queued'], {
    deduplicationId: 'send-3',
    onDuplicate: 'send',
  });
  expect(duplicate).toMatchObject({ workflowId: holder.workflowId, created: false });
  tasks.gate('s3-holder').open();
  await expect(holder.getResult({ timeoutMs: 10_000 })).resolves.toEqual(['s3-queued']);
});

it('starts the next workflow from what a holder ended without receiving; the others go to that one, in order', async () => {
  const holder = await app.queues.enqueue('inbox', tasks.ignore, ['s4-holder'], {
    deduplicationId: 'send-4',
    onDuplicate: 'send',
  });
  await waitFor(() => tasks.ran('s4-holder').length === 1, { what: 'the holder to run' });
  for (const label of ['s4-a', 's4-b', 's4-c']) {
    await app.queues.enqueue('inbox', tasks.ignore, [label], { deduplicationId: 'send-4', onDuplicate: 'send' });
  }
  tasks.gate('s4-holder').open();
  await holder.getResult({ timeoutMs: 10_000 });

  // s4-a runs next (never receiving s4-b, s4-c), then s4-b with s4-c waiting for it, then s4-c.
  for (const label of ['s4-a', 's4-b', 's4-c']) {
    await waitFor(() => tasks.ran(label).length === 1, { what: `${label} to run as the key's holder` });
    const rows = await rowsOfKey('send-4');
    expect(rows.filter((row) => row.status === 'ENQUEUED' || row.status === 'PENDING')).toEqual([
      { workflow_id: tasks.ran(label)[0].workflowId, status: 'PENDING', inputs: [label] },
    ]);
    tasks.gate(label).open();
  }
  await waitFor(async () => (await rowsOfKey('send-4')).every((row) => row.status === 'SUCCESS'), {
    what: 'every workflow of the key to finish',
  });
  expect((await rowsOfKey('send-4')).map((row) => row.inputs)).toEqual([['s4-holder'], ['s4-a'], ['s4-b'], ['s4-c']]);
});

it('refuses while a finished holder keeps the key for its window, and still compares arguments when asked', async () => {
  const holder = await app.queues.enqueue('inbox', tasks.ignore, ['s5-holder'], {
    deduplicationId: 'send-5',
    onDuplicate: 'send',
    deduplicationWindowMs: 60_000,
  });
  await expect(
    app.queues.enqueue('inbox', tasks.ignore, ['s5-other'], {
      deduplicationId: 'send-5',
      onDuplicate: 'send',
      requireSameArgs: true,
    }),
  ).rejects.toBeInstanceOf(DeduplicationMismatchError);
  tasks.gate('s5-holder').open();
  await holder.getResult({ timeoutMs: 10_000 });
  const refused = await app.queues
    .enqueue('inbox', tasks.ignore, ['s5-late'], { deduplicationId: 'send-5', onDuplicate: 'send' })
    .catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(QueueDeduplicatedError);
  expect(refused).toMatchObject({ existingWorkflowId: holder.workflowId });
  expect(await rowsOfKey('send-5')).toEqual([
    { workflow_id: holder.workflowId, status: 'SUCCESS', inputs: ['s5-holder'] },
  ]);
  const { rows } = await pool.query(
    `SELECT count(*)::int AS n FROM "${schema}".workflow_messages WHERE workflow_id = $1`,
    [holder.workflowId],
  );
  expect(rows[0].n).toBe(0);
});

it("delivers a duplicate whose transaction commits while the holder is ending (its end waited for the send's lock)", async () => {
  const holder = await app.queues.enqueue('inbox', tasks.ignore, ['s6-holder'], {
    deduplicationId: 'send-6',
    onDuplicate: 'send',
  });
  await waitFor(() => tasks.ran('s6-holder').length === 1, { what: 'the holder to run' });
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const sent = await app.queues.enqueue('inbox', tasks.ignore, ['s6-late'], {
      deduplicationId: 'send-6',
      onDuplicate: 'send',
      db: fromPg(client),
    });
    expect(sent).toMatchObject({ workflowId: holder.workflowId, created: false });
    tasks.gate('s6-holder').open();
    await waitFor(async () => (await activeTableLockWaits(pool, schema)) > 0, {
      what: "the holder's end to wait for the send's lock",
    });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await holder.getResult({ timeoutMs: 10_000 });
  await waitFor(() => tasks.ran('s6-late').length === 1, { what: 'the late duplicate to start the next workflow' });
  const rows = await rowsOfKey('send-6');
  expect(rows).toEqual([
    { workflow_id: holder.workflowId, status: 'SUCCESS', inputs: ['s6-holder'] },
    { workflow_id: tasks.ran('s6-late')[0].workflowId, status: 'PENDING', inputs: ['s6-late'] },
  ]);
  tasks.gate('s6-late').open();
});
