import type { MessageEvent } from '@nestjs/common';
import {
  DedupQueueError,
  InvalidArgumentError,
  QueueService,
  StreamValue,
  WorkflowNotFoundError,
  closeStream,
  writeStream,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { QueueDatabase, workflowStreamStore } from 'nest-dedup-queue/testing';
import { lastValueFrom, toArray } from 'rxjs';
import { StreamTasks, streamTablesSql } from './fixtures/stream-tasks';
import { databaseUrl } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { useWorkerSuite } from './support/worker-suite';

/** Everything a stream yields until it ends. */
async function collect<T>(stream: AsyncIterable<StreamValue<T>>): Promise<Array<StreamValue<T>>> {
  const values: Array<StreamValue<T>> = [];
  for await (const value of stream) values.push(value);
  return values;
}

/**
 * Durable streams (docs/streams.md): written by workflows in this process (queue `streams`) and in worker processes
 * (child-stream-worker.ts, queue `remote`), read here by an app of their own that polls only every 60 s: what
 * arrives sooner was pushed (a hint on the LISTEN connection, then a read of the table).
 */
describe('durable streams', () => {
  const suite = useWorkerSuite({
    prefix: 'streams',
    queues: [{ name: 'remote' }],
    providers: [],
    tablesSql: streamTablesSql,
    worker: 'child-stream-worker.ts',
  });
  const { schema, release, startWorker, sigkill } = suite;
  let pool: Pool;
  let app: QueueApp;
  /** The app of the workflows (it drains `streams`) and the app of the readers (no worker, polling every minute). */
  let readers: QueueApp;
  let queues: QueueService;
  let reading: QueueService;
  let tasks: StreamTasks;

  const stored = async (workflowId: string, key: string) =>
    (
      await pool.query(
        `SELECT stream_offset AS offset, value, closed FROM "${schema}".workflow_streams
         WHERE workflow_id = $1 AND stream_key = $2 ORDER BY stream_offset`,
        [workflowId, key],
      )
    ).rows as Array<{ offset: number; value: unknown; closed: boolean }>;
  const valuesOf = async (workflowId: string, key: string) =>
    (await stored(workflowId, key)).filter((row) => !row.closed).map((row) => row.value);

  beforeAll(async () => {
    pool = suite.pool;
    app = await startQueueApp(
      {
        schema,
        queues: [{ name: 'streams', workerConcurrency: 20 }, { name: 'remote' }],
        worker: { queues: ['streams'] },
        pollIntervalMs: 200,
        inputLimits: { maxStreamValues: 100, maxStreamBytes: 4096 },
      },
      [StreamTasks],
    );
    readers = await startQueueApp({
      schema,
      connection: { url: databaseUrl(), applicationName: 'stream-readers', poolSize: 6 },
      queues: [{ name: 'streams' }, { name: 'remote' }],
      worker: false,
      pollIntervalMs: 60_000,
    });
    queues = app.queues;
    reading = readers.queues;
    tasks = app.get(StreamTasks);
    tasks.useSchema(schema);
  });

  afterAll(async () => {
    await readers?.close();
    await app?.close();
  });

  it('pushes the values a worker process writes to a reader here, in order, and ends when the workflow ends', async () => {
    await startWorker('remote-tokens');
    const handle = await queues.enqueue('remote', 'StreamTasks.tokens', [['Hello', 'durable', 'world'], 'g1', 2]);
    const seen: Array<StreamValue<string>> = [];
    const following = (async () => {
      for await (const value of reading.readStream<string>(handle.workflowId, 'tokens')) seen.push(value);
    })();
    await waitFor(() => seen.length === 2, { timeoutMs: 10_000, what: 'the first two tokens' });
    const released = Date.now();
    await release('g1');
    await following;
    expect(Date.now() - released).toBeLessThan(5_000);
    expect(seen).toEqual([
      { offset: 0, value: 'Hello' },
      { offset: 1, value: 'durable' },
      { offset: 2, value: 'world' },
    ]);
    await expect(handle.getResult({ timeoutMs: 5_000 })).resolves.toBe('Hello durable world');
    // A finished workflow's stream is read whole, and from an offset.
    await expect(collect(reading.readStream(handle.workflowId, 'tokens'))).resolves.toEqual(seen);
    await expect(collect(reading.readStream(handle.workflowId, 'tokens', { offset: 2 }))).resolves.toEqual([
      { offset: 2, value: 'world' },
    ]);
    await expect(collect(reading.readStream(handle.workflowId, 'never-written'))).resolves.toEqual([]);
  });

  it('does not append again what a re-executed body wrote (a retry)', async () => {
    const handle = await queues.enqueue('streams', tasks.retried, []);
    await expect(handle.getResult({ timeoutMs: 10_000 })).resolves.toBe(2);
    await expect(collect(reading.readStream(handle.workflowId, 'letters'))).resolves.toEqual([
      { offset: 0, value: 'a' },
      { offset: 1, value: { b: true } },
      { offset: 2, value: 'c' },
    ]);
    const { rows } = await pool.query(
      `SELECT step_index, step_name FROM "${schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
      [handle.workflowId],
    );
    expect(rows).toEqual([
      { step_index: 0, step_name: 'writeStream letters' },
      { step_index: 1, step_name: 'writeStream letters' },
      { step_index: 2, step_name: 'writeStream letters' },
    ]);
  });

  it('appends nothing again when a body write is sent again (its answer lost): its position was recorded with it', async () => {
    const handle = await queues.enqueue('streams', tasks.holds, ['g-resend']);
    await waitFor(async () => (await valuesOf(handle.workflowId, 'held')).length === 1, { what: 'the first value' });
    const { rows } = await pool.query(`SELECT attempts FROM "${schema}".workflow_queue WHERE workflow_id = $1`, [
      handle.workflowId,
    ]);
    const resend = () =>
      workflowStreamStore(app.get(QueueDatabase)).append(
        { queueName: 'streams', workflowId: handle.workflowId, attempt: rows[0].attempts as number, flagged: true },
        {
          key: 'held',
          items: [{ valueJson: '"first"', bytes: 7, stepIndex: 0 }],
          stepName: 'writeStream held',
          maxValues: 100,
          maxBytes: 4096,
        },
      );
    await expect(resend()).resolves.toEqual({ outcome: 'recorded', outputJson: '0' });
    expect(await valuesOf(handle.workflowId, 'held')).toEqual(['first']);
    await release('g-resend');
    await handle.getResult({ timeoutMs: 10_000 });
    expect(await valuesOf(handle.workflowId, 'held')).toEqual(['first', 'second']);
    await expect(resend()).resolves.toEqual({ outcome: 'not-owned' });
  });

  it('keeps each value once when a SIGKILLed worker is recovered by another, and its reader follows to the end', async () => {
    const first = await startWorker('recovered-a');
    const handle = await queues.enqueue('remote', 'StreamTasks.tokens', [['one', 'two', 'three', 'four'], 'g2', 2]);
    const followed = collect(reading.readStream<string>(handle.workflowId, 'tokens'));
    await waitFor(async () => (await valuesOf(handle.workflowId, 'tokens')).length === 2, { what: 'two values' });
    await sigkill(first);
    await startWorker('recovered-b');
    await release('g2');
    await expect(handle.getResult({ timeoutMs: 20_000 })).resolves.toBe('one two three four');
    expect((await followed).map((entry) => entry.value)).toEqual(['one', 'two', 'three', 'four']);
    expect(await valuesOf(handle.workflowId, 'tokens')).toEqual(['one', 'two', 'three', 'four']);
  });

  it("appends a step's write each time the step runs (at least once), and a transactional step's once", async () => {
    const inStep = await queues.enqueue('streams', tasks.emitInStep, []);
    await expect(inStep.getResult({ timeoutMs: 10_000 })).resolves.toBe(2);
    expect(await valuesOf(inStep.workflowId, 'step')).toEqual(['run 1', 'run 2']);

    const inTransaction = await queues.enqueue('streams', tasks.inTransaction, []);
    await inTransaction.getResult({ timeoutMs: 10_000 });
    await expect(collect(reading.readStream(inTransaction.workflowId, 'tx'))).resolves.toEqual([
      { offset: 0, value: 'in step' },
      { offset: 1, value: 'after' },
    ]);
  });

  it('closes every stream when its workflow ends: an error, a cancel, and a workflow that never wrote', async () => {
    const failed = await queues.enqueue('streams', tasks.failsAfterWriting, []);
    await expect(collect(reading.readStream(failed.workflowId, 'doomed'))).resolves.toEqual([
      { offset: 0, value: 'last words' },
    ]);
    expect((await failed.getStatus()).status).toBe('ERROR');

    const held = await queues.enqueue('streams', tasks.holds, ['g-cancel']);
    const seen: unknown[] = [];
    const following = (async () => {
      for await (const { value } of reading.readStream(held.workflowId, 'held')) seen.push(value);
    })();
    await waitFor(() => seen.length === 1, { what: 'the first value' });
    await queues.cancel(held.workflowId);
    await following;
    expect(seen).toEqual(['first']);

    const silent = await queues.enqueue('streams', tasks.silent, ['g-silent']);
    const waiting = collect(reading.readStream(silent.workflowId, 'nothing'));
    await waitFor(async () => (await silent.getStatus()).status === 'PENDING', { what: 'the silent workflow to run' });
    await release('g-silent');
    await expect(waiting).resolves.toEqual([]);
  });

  it("gives a fork its source's stream up to its start, and appends after it", async () => {
    const source = await queues.enqueue('streams', tasks.forkable, []);
    await waitFor(async () => (await source.getStatus()).status === 'ERROR', { what: 'the source to fail' });
    const fork = await queues.fork(source.workflowId);
    await expect(fork.getResult({ timeoutMs: 10_000 })).resolves.toBe('forked');
    await expect(collect(reading.readStream(fork.workflowId, 'letters'))).resolves.toEqual([
      { offset: 0, value: 'a' },
      { offset: 1, value: 'b' },
      { offset: 2, value: 'c' },
    ]);
    expect(await valuesOf(source.workflowId, 'letters')).toEqual(['a', 'b']);
    // From position 1 (the step that wrote b): only a is copied; the fork's run writes b and c again.
    const early = await queues.fork(source.workflowId, { fromStep: 1, workflowId: `${source.workflowId}-fork-early` });
    await expect(early.getResult({ timeoutMs: 10_000 })).resolves.toBe('forked');
    expect(await valuesOf(early.workflowId, 'letters')).toEqual(['a', 'b', 'c']);
  });

  it('closeStream ends its readers; a write after it is refused with StreamClosedError; a second close does nothing', async () => {
    const handle = await queues.enqueue('streams', tasks.closesEarly, []);
    await expect(handle.getResult({ timeoutMs: 10_000 })).resolves.toBe('StreamClosedError');
    expect(await stored(handle.workflowId, 'early')).toEqual([
      { offset: 0, value: 1, closed: false },
      { offset: 1, value: null, closed: true },
    ]);
    await expect(collect(reading.readStream(handle.workflowId, 'early'))).resolves.toEqual([{ offset: 0, value: 1 }]);
  });

  it('refuses a value past the cap in values or in bytes with StreamLimitError, appending nothing', async () => {
    const byCount = await queues.enqueue('streams', tasks.capped, [150, 1]);
    await expect(byCount.getResult({ timeoutMs: 10_000 })).resolves.toEqual({
      written: 100,
      refused: 'StreamLimitError',
      limit: 'maxStreamValues',
    });
    expect(await valuesOf(byCount.workflowId, 'capped')).toHaveLength(100);
    // 1,002 bytes of JSON each: four fit in 4,096.
    const byBytes = await queues.enqueue('streams', tasks.capped, [10, 1000]);
    await expect(byBytes.getResult({ timeoutMs: 10_000 })).resolves.toEqual({
      written: 4,
      refused: 'StreamLimitError',
      limit: 'maxStreamBytes',
    });
    const { rows } = await pool.query(
      `SELECT max(total_bytes)::int AS bytes FROM "${schema}".workflow_streams WHERE workflow_id = $1`,
      [byBytes.workflowId],
    );
    expect(rows[0].bytes).toBe(4008);
  });

  it('lands values written without awaiting each in call order', async () => {
    const handle = await queues.enqueue('streams', tasks.burst, [50]);
    await handle.getResult({ timeoutMs: 10_000 });
    const values = await collect(reading.readStream<number>(handle.workflowId, 'burst'));
    expect(values).toEqual(Array.from({ length: 50 }, (_, index) => ({ offset: index, value: index })));
  });

  it('serves many readers of one stream from one feed, on the pool and the one LISTEN connection', async () => {
    const handle = await queues.enqueue('streams', tasks.holds, ['g-many']);
    const readers = Array.from({ length: 300 }, () => collect(reading.readStream(handle.workflowId, 'held')));
    await waitFor(async () => (await valuesOf(handle.workflowId, 'held')).length === 1, { what: 'the first value' });
    const { rows } = await pool.query(
      `SELECT count(*)::int AS connections FROM pg_stat_activity WHERE application_name = 'stream-readers'`,
    );
    expect(rows[0].connections).toBeLessThanOrEqual(6 + 1);
    await release('g-many');
    const results = await Promise.all(readers);
    for (const result of results) expect(result.map((entry) => entry.value)).toEqual(['first', 'second']);
  });

  it('streamEvents gives Nest MessageEvents with the offset as id, resumes after Last-Event-ID, and ends with `end`', async () => {
    const handle = await queues.enqueue('streams', tasks.tokens, [['a', 'b', 'c']]);
    await handle.getResult({ timeoutMs: 10_000 });
    const events = (lastEventId?: string) =>
      lastValueFrom(reading.streamEvents(handle.workflowId, 'tokens', { lastEventId }).pipe(toArray()));
    await expect(events()).resolves.toEqual<MessageEvent[]>([
      { id: '0', data: '"a"' },
      { id: '1', data: '"b"' },
      { id: '2', data: '"c"' },
      { id: '2', type: 'end', data: { offset: 3 } },
    ]);
    await expect(events('1')).resolves.toEqual<MessageEvent[]>([
      { id: '2', data: '"c"' },
      { id: '2', type: 'end', data: { offset: 3 } },
    ]);
    await expect(events('2')).resolves.toEqual<MessageEvent[]>([{ id: '2', type: 'end', data: { offset: 3 } }]);
  });

  it('polls when notifications are off, and still reads to the end', async () => {
    const polling = await startQueueApp({
      schema,
      queues: [{ name: 'streams' }, { name: 'remote' }],
      worker: false,
      listen: false,
      pollIntervalMs: 200,
    });
    try {
      const handle = await queues.enqueue('streams', tasks.tokens, [['x', 'y'], 'g-poll', 1]);
      const polled = collect(polling.queues.readStream<string>(handle.workflowId, 'tokens'));
      await waitFor(async () => (await valuesOf(handle.workflowId, 'tokens')).length === 1, { what: 'x' });
      await release('g-poll');
      expect((await polled).map((entry) => entry.value)).toEqual(['x', 'y']);
    } finally {
      await polling.close();
    }
  });

  it('refuses writes outside a workflow and bad arguments before reading; an unknown workflow on iteration', async () => {
    await expect(writeStream('k', 1)).rejects.toThrow(DedupQueueError);
    await expect(closeStream('k')).rejects.toThrow(/only available while a workflow runs/);
    expect(() => reading.readStream('', 'k')).toThrow(InvalidArgumentError);
    expect(() => reading.readStream('id', '')).toThrow(InvalidArgumentError);
    expect(() => reading.readStream('id', 'k'.repeat(256))).toThrow(InvalidArgumentError);
    expect(() => reading.readStream('id', 'k', { offset: -1 })).toThrow(InvalidArgumentError);
    expect(() => reading.readStream('id', 'k', { offset: 1.5 })).toThrow(InvalidArgumentError);
    expect(() => reading.streamEvents('id', 'k', { lastEventId: 'abc' })).toThrow(InvalidArgumentError);
    await expect(collect(reading.readStream('no-such-workflow', 'k'))).rejects.toThrow(WorkflowNotFoundError);
  });
});
