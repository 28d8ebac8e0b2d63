import { InvalidArgumentError, WorkflowHandle, WorkflowNotFoundError } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import type { WaitingTasks } from './fixtures/waiting-tasks';
import { useWaitingSuite } from './fixtures/waiting-suite';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

/**
 * Messages between workflows (`send` / `recv`) with real worker processes (child-waiting-worker.ts, queue `inbox`):
 * each message received once, in order per topic, recorded so that a workflow re-executed after a SIGKILL gets the
 * same message at the same point; a workflow waiting in `recv` is WAITING until a message or its timeout.
 */
describe('workflow messages', () => {
  const suite = useWaitingSuite('messages');
  const { schema, startWorker } = suite;
  let pool: Pool;
  let app: QueueApp;
  let tasks: WaitingTasks;

  beforeAll(() => {
    pool = suite.pool();
    app = suite.app();
    tasks = suite.tasks();
  });

  const waitForStatus = (handle: WorkflowHandle, status: string) =>
    waitFor(async () => (await handle.getStatus()).status === status, {
      timeoutMs: 20_000,
      what: `${handle.workflowId} ${status}`,
    });

  const eventsOf = async (workflowId: string) =>
    (
      await pool.query<{ kind: string; data: unknown }>(
        `SELECT kind, data FROM "${schema}".events WHERE workflow_id = $1 ORDER BY seq`,
        [workflowId],
      )
    ).rows;

  const messagesOf = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT topic, message, received_at IS NOT NULL AS received FROM "${schema}".workflow_messages
         WHERE workflow_id = $1 ORDER BY seq`,
        [workflowId],
      )
    ).rows;

  it('across a SIGKILL, recv returns the recorded first message and then the next one', async () => {
    // NOTE: the first message is there before any worker runs the body, so that its first recv finds it (a worker
    // started first could run the body before the send: it would suspend, then start again on the message).
    const receiver = await app.queues.enqueue('inbox', tasks.receive, ['orders', 2, 60_000]);
    await app.queues.send(receiver.workflowId, { n: 1 }, { topic: 'orders' });
    const first = await startWorker('messages-killed');
    await waitFor(async () => (await eventsOf(receiver.workflowId)).some((event) => event.kind === 'received'), {
      what: 'the first message received',
    });
    await waitForStatus(receiver, 'WAITING');
    first.child.kill('SIGKILL');
    await first.ended;

    await startWorker('messages-restarted');
    await app.queues.send(receiver.workflowId, { n: 2 }, { topic: 'orders' });
    await expect(receiver.getResult({ timeoutMs: 15_000 })).resolves.toEqual([{ n: 1 }, { n: 2 }]);
    expect(await eventsOf(receiver.workflowId)).toEqual([
      { kind: 'started', data: null },
      { kind: 'received', data: { n: 1 } },
      { kind: 'started', data: null },
      { kind: 'received', data: { n: 1 } },
      { kind: 'received', data: { n: 2 } },
    ]);
    expect(await messagesOf(receiver.workflowId)).toEqual([
      { topic: 'orders', message: { n: 1 }, received: true },
      { topic: 'orders', message: { n: 2 }, received: true },
    ]);
  });

  it('never misses a message sent while the receiver is about to wait (no timeout: a lost wake-up would hang)', async () => {
    await startWorker('messages-race');
    const receiver = await app.queues.enqueue('inbox', tasks.receive, ['race', 20, null]);
    await waitForStatus(receiver, 'WAITING');
    const sent = Array.from({ length: 20 }, (_, n) => n);
    for (const n of sent) {
      await app.queues.send(receiver.workflowId, n, { topic: 'race' });
      await new Promise((resolve) => setTimeout(resolve, n % 4 === 0 ? 40 : n % 3));
    }
    await expect(receiver.getResult({ timeoutMs: 30_000 })).resolves.toEqual(sent);
    // It waited (suspended, then claimed again) before the first message at least.
    expect((await receiver.getStatus()).attempts).toBeGreaterThanOrEqual(2);
  });

  it('delivers a message sent twice with one idempotency key once', async () => {
    await startWorker('messages-idempotent');
    const receiver = await app.queues.enqueue('inbox', tasks.receive, [null, 2, 1500]);
    await app.queues.send(receiver.workflowId, 'hello', { idempotencyKey: 'greeting' });
    await app.queues.send(receiver.workflowId, 'hello', { idempotencyKey: 'greeting' });
    await expect(receiver.getResult({ timeoutMs: 15_000 })).resolves.toEqual(['hello', null]);
    expect(await messagesOf(receiver.workflowId)).toEqual([{ topic: '', message: 'hello', received: true }]);
  });

  it('returns undefined after the timeout, suspended meanwhile, and records it', async () => {
    await startWorker('messages-timeout');
    const receiver = await app.queues.enqueue('inbox', tasks.receive, ['never', 1, 2500]);
    await waitForStatus(receiver, 'WAITING');
    await expect(receiver.getResult({ timeoutMs: 15_000 })).resolves.toEqual([null]);
    const { rows } = await pool.query(
      `SELECT step_index, step_name, output FROM "${schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
      [receiver.workflowId],
    );
    expect(rows).toEqual([
      { step_index: 0, step_name: 'recv deadline', output: expect.any(String) },
      { step_index: 1, step_name: 'recv', output: null },
    ]);
    // A message sent after the timeout stays unreceived with its workflow.
    await app.queues.send(receiver.workflowId, 'late', { topic: 'never' });
    expect(await messagesOf(receiver.workflowId)).toEqual([{ topic: 'never', message: 'late', received: false }]);
  });

  it('receives the messages of each topic in the order they were sent', async () => {
    await startWorker('messages-order');
    const receiver = await app.queues.enqueue('inbox', tasks.receiveTopics, [['b', 'a', 'a', 'b']]);
    for (const [topic, message] of [
      ['a', 'a1'],
      ['b', 'b1'],
      ['a', 'a2'],
      ['b', 'b2'],
    ]) {
      await app.queues.send(receiver.workflowId, message, { topic });
    }
    await expect(receiver.getResult({ timeoutMs: 15_000 })).resolves.toEqual(['b1', 'a1', 'a2', 'b2']);
  });

  it('refuses a message for an unknown workflow, and bad input, before writing anything', async () => {
    await expect(app.queues.send('no-such-workflow', 'x')).rejects.toBeInstanceOf(WorkflowNotFoundError);
    await expect(app.queues.send('', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(app.queues.send('w', 'x', { topic: '' })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(app.queues.send('w', { n: 1n })).rejects.toBeInstanceOf(InvalidArgumentError);
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".workflow_messages WHERE workflow_id IN ('no-such-workflow', 'w', '')`,
    );
    expect(rows).toEqual([{ n: 0 }]);
  });
});
