import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { QueueDeduplicatedError } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { TracedSteps, TracedTasks } from './fixtures/child-traced-worker';
import { SpanRecord, toSpanRecord } from './fixtures/span-record';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const MESSAGING = { 'messaging.system': 'nest-dedup-queue', 'messaging.destination.name': 'traced' };

describe('tracing across processes', () => {
  const schema = uniqueSchema('tracing');
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  let app: QueueApp;
  let pool: Pool;

  beforeAll(async () => {
    provider.register();
    pool = testPool();
    app = await startQueueApp({ schema, queues: [{ name: 'traced' }], worker: false }, [TracedTasks, TracedSteps]);
  });

  afterAll(async () => {
    await killFixtures();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
    await provider.shutdown();
    trace.disable();
  });

  const startWorker = async (executorId: string): Promise<FixtureProcess> => {
    const worker = spawnFixture('child-traced-worker.ts', executorId, { SCHEMA: schema, EXECUTOR_ID: executorId });
    await worker.message('ready');
    return worker;
  };
  const spansOf = (worker: FixtureProcess): SpanRecord[] =>
    worker.messages.filter((message) => message.type === 'spans').flatMap((message) => message.spans as SpanRecord[]);
  const sendSpan = (workflowId: string): SpanRecord => {
    const found = exporter
      .getFinishedSpans()
      .map(toSpanRecord)
      .find((span) => span.attributes['messaging.message.id'] === workflowId);
    if (!found) throw new Error(`no send span for ${workflowId}`);
    return found;
  };
  const processSpan = (worker: FixtureProcess, workflowId: string) =>
    waitFor(
      () =>
        spansOf(worker).find(
          (span) => span.name === 'process traced' && span.attributes['messaging.message.id'] === workflowId,
        ),
      { what: `the process span of ${workflowId}` },
    );

  it('makes the run in another process a CONSUMER child of the PRODUCER enqueue span, with a span per step', async () => {
    const worker = await startWorker('traced-1');
    const tracer = trace.getTracer('test');
    const { handle, request } = await tracer.startActiveSpan('POST /things', async (span) => {
      const enqueued = await app.queues.enqueue('traced', 'TracedTasks.withSteps', ['a']);
      span.end();
      return { handle: enqueued, request: toSpanRecord(span as never) };
    });
    await expect(handle.getResult()).resolves.toEqual(['first a', 'second a']);

    const send = sendSpan(handle.workflowId);
    expect(send).toMatchObject({
      name: 'send traced',
      kind: 'PRODUCER',
      traceId: request.traceId,
      parentSpanId: request.spanId,
      attributes: { ...MESSAGING, 'messaging.operation.type': 'send', 'messaging.message.id': handle.workflowId },
    });
    const run = await processSpan(worker, handle.workflowId);
    expect(run).toMatchObject({
      kind: SpanKind[SpanKind.CONSUMER],
      traceId: send.traceId,
      parentSpanId: send.spanId,
      attributes: { ...MESSAGING, 'messaging.operation.type': 'process', 'messaging.message.id': handle.workflowId },
      status: { code: SpanStatusCode.UNSET },
    });
    const stored = await pool.query(`SELECT trace_context FROM "${schema}".workflows WHERE workflow_id = $1`, [
      handle.workflowId,
    ]);
    expect(stored.rows[0].trace_context).toBe(`00-${send.traceId}-${send.spanId}-01`);
    const steps = await waitFor(
      () => {
        const found = spansOf(worker).filter((span) => span.parentSpanId === run.spanId);
        return found.length === 2 && found;
      },
      { what: 'two step spans' },
    );
    expect(steps.map((span) => span.name).sort()).toEqual(['step TracedSteps.first', 'step TracedSteps.second']);
    expect(steps.every((span) => span.traceId === send.traceId)).toBe(true);

    const failing = await app.queues.enqueue('traced', 'TracedTasks.fail', []);
    await expect(failing.getResult()).rejects.toThrow('traced failure');
    const failed = await processSpan(worker, failing.workflowId);
    expect(failed.parentSpanId).toBe(sendSpan(failing.workflowId).spanId);
    expect(failed.status).toEqual({ code: SpanStatusCode.ERROR, message: 'traced failure' });
    expect(failed.events).toEqual([
      expect.objectContaining({
        name: 'exception',
        attributes: expect.objectContaining({ 'exception.message': 'traced failure' }),
      }),
    ]);
    worker.child.kill('SIGKILL');
    await worker.ended;
  });

  it('stores each enqueue its own context, also when concurrent enqueues share a statement, and one per bulk call', async () => {
    const worker = await startWorker('traced-3');
    const concurrent = await Promise.all(
      ['x', 'y', 'z'].map((label) => app.queues.enqueue('traced', 'TracedTasks.withSteps', [label])),
    );
    const bulk = await app.queues.enqueueMany('traced', 'TracedTasks.withSteps', [{ args: ['b1'] }, { args: ['b2'] }]);
    const ids = [...concurrent.map((handle) => handle.workflowId), ...bulk.map((item) => item.workflowId)];
    const { rows } = await pool.query(
      `SELECT workflow_id, trace_context FROM "${schema}".workflows WHERE workflow_id = ANY($1::text[])`,
      [ids],
    );
    const stored = new Map(rows.map((row) => [row.workflow_id, row.trace_context]));
    for (const handle of concurrent) {
      const send = sendSpan(handle.workflowId);
      expect(stored.get(handle.workflowId)).toBe(`00-${send.traceId}-${send.spanId}-01`);
    }
    const bulkSpan = exporter
      .getFinishedSpans()
      .map(toSpanRecord)
      .find((span) => span.attributes['messaging.batch.message_count'] === 2) as SpanRecord;
    expect(bulkSpan).toMatchObject({ name: 'send traced', kind: 'PRODUCER' });
    for (const item of bulk) {
      expect(stored.get(item.workflowId)).toBe(`00-${bulkSpan.traceId}-${bulkSpan.spanId}-01`);
      expect((await processSpan(worker, item.workflowId)).parentSpanId).toBe(bulkSpan.spanId);
    }
    worker.child.kill('SIGKILL');
    await worker.ended;
  });

  it('parents a recovered run (after a SIGKILL, in a new process) to the enqueue span; a duplicate is a span event', async () => {
    const first = await startWorker('traced-2');
    const handle = await app.queues.enqueue('traced', 'TracedTasks.holdOnFirstRun', [], { deduplicationId: 'held' });
    await first.message('holding');
    await expect(
      app.queues.enqueue('traced', 'TracedTasks.holdOnFirstRun', [], { deduplicationId: 'held' }),
    ).rejects.toBeInstanceOf(QueueDeduplicatedError);
    first.child.kill('SIGKILL');
    await first.ended;

    const second = await startWorker('traced-2');
    await expect(handle.getResult()).resolves.toBe('recovered');
    const send = sendSpan(handle.workflowId);
    const run = await processSpan(second, handle.workflowId);
    expect(run).toMatchObject({
      traceId: send.traceId,
      parentSpanId: send.spanId,
      attributes: { 'dedup_queue.attempt': 2 },
    });
    expect(spansOf(first).some((span) => span.attributes['messaging.message.id'] === handle.workflowId)).toBe(false);

    const duplicate = exporter
      .getFinishedSpans()
      .map(toSpanRecord)
      .filter((span) => span.name === 'send traced' && span.events.some((event) => event.name === 'deduplicated'));
    expect(duplicate).toHaveLength(1);
    expect(duplicate[0].status.code).toBe(SpanStatusCode.UNSET);
    expect(duplicate[0].events).toEqual([
      {
        name: 'deduplicated',
        attributes: {
          'dedup_queue.deduplication_id': 'held',
          'dedup_queue.existing_workflow_id': handle.workflowId,
          'dedup_queue.deduplication_outcome': 'rejected',
        },
      },
    ]);
  });
});
