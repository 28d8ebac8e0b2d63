import { Injectable, LoggerService } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  DedupQueueModule,
  DeduplicationEvent,
  OnWorkflowEvent,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
  WorkflowEvent,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';
import { expireExecutor, syncReadyRows } from './support/ready-rows';

@Injectable()
class EventTasks {
  @Workflow()
  async ok(label: string): Promise<string> {
    return label;
  }

  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 10, jitter: false } })
  async fail(): Promise<never> {
    throw new Error('boom');
  }

  /** Sleeps until `ms` have passed or the run is interrupted (its timeout): nothing is left running afterwards. */
  @Workflow()
  async slow(ms: number): Promise<void> {
    await sleep(ms, undefined, { signal: workflowContext().signal });
  }
}

/** Records every event it listens to; subclassed once per kind of provider. */
class EventRecorder {
  readonly events: WorkflowEvent[] = [];

  @OnWorkflowEvent('completed')
  @OnWorkflowEvent('failed')
  @OnWorkflowEvent('cancelled')
  @OnWorkflowEvent('recovered')
  @OnWorkflowEvent('dead-lettered')
  @OnWorkflowEvent('deduplicated')
  record(event: WorkflowEvent): void {
    this.events.push(event);
  }
}

@Injectable()
class ClassListener extends EventRecorder {}
class FactoryListener extends EventRecorder {}
class ValueListener extends EventRecorder {}

@Injectable()
class FaultyListener {
  @OnWorkflowEvent('completed')
  throws(): void {
    throw new Error('listener throws');
  }

  @OnWorkflowEvent('completed')
  async rejects(): Promise<void> {
    throw new Error('listener rejects');
  }
}

class CapturingLogger implements LoggerService {
  readonly errors: string[] = [];
  log(): void {}
  warn(): void {}
  debug(): void {}
  verbose(): void {}
  error(message: unknown): void {
    this.errors.push(String(message));
  }
}

describe('@OnWorkflowEvent', () => {
  const schema = uniqueSchema('events');
  const logger = new CapturingLogger();
  const valueListener = new ValueListener();
  let module: TestingModule;
  let queues: QueueService;
  let tasks: EventTasks;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          queues: [{ name: 'events' }, { name: 'parked' }],
          leaseMs: 3000,
          heartbeatIntervalMs: 100,
        }),
      ],
      providers: [
        EventTasks,
        ClassListener,
        { provide: 'FACTORY_LISTENER', useFactory: () => new FactoryListener() },
        { provide: 'VALUE_LISTENER', useValue: valueListener },
        FaultyListener,
      ],
    }).compile();
    module.useLogger(logger);
    await module.init();
    queues = module.get(QueueService);
    tasks = module.get(EventTasks);
    await queues.pauseQueue('parked');
  });

  afterAll(async () => {
    await module.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const recorders = () => [module.get(ClassListener), module.get<FactoryListener>('FACTORY_LISTENER'), valueListener];
  const sortedEvents = (recorder: EventRecorder) =>
    [...recorder.events].sort((a, b) => `${a.event}${a.workflowId}`.localeCompare(`${b.event}${b.workflowId}`));

  it('calls class, factory and value providers once per occurrence of each event, in this process', async () => {
    const deduplicated: DeduplicationEvent[] = [];
    const stopListening = queues.onDeduplicated((event) => deduplicated.push(event));
    const ok = await queues.enqueue('events', tasks.ok, ['a']);
    const failed = await queues.enqueue('events', tasks.fail, []);
    const timedOut = await queues.enqueue('events', tasks.slow, [10_000], { timeoutMs: 300 });
    const cancelled = await queues.enqueue('parked', tasks.ok, ['c']);
    expect(await queues.cancel(cancelled.workflowId)).toBe('CANCELLED');
    expect(await queues.cancel(cancelled.workflowId)).toBe('CANCELLED');
    const holder = await queues.enqueue('parked', tasks.ok, ['h'], { deduplicationId: 'key' });
    await expect(queues.enqueue('parked', tasks.ok, ['h2'], { deduplicationId: 'key' })).rejects.toBeInstanceOf(
      QueueDeduplicatedError,
    );
    // A run left by a process that died (its lease expired), and one that used up its recoveries.
    const recovered = await queues.enqueue('parked', tasks.ok, ['r']);
    const deadLettered = await queues.enqueue('parked', tasks.ok, ['d']);
    await pool.query(
      `UPDATE "${schema}".workflow_queue SET status = 'PENDING', executor_id = 'gone', attempts = 1,
              recovery_attempts = CASE WHEN workflow_id = $2 THEN max_recovery_attempts ELSE 0 END
       WHERE workflow_id = ANY($1::text[])`,
      [[recovered.workflowId, deadLettered.workflowId], deadLettered.workflowId],
    );
    await syncReadyRows(pool, schema);
    await expireExecutor(pool, schema, 'gone', ['parked']);

    await waitFor(() => recorders().every((recorder) => recorder.events.length >= 7), { what: 'seven events each' });
    // A barrier: an event after all the others; nothing may arrive twice meanwhile.
    const barrier = await queues.enqueue('events', tasks.ok, ['barrier']);
    await waitFor(() => recorders().every((recorder) => recorder.events.length >= 8), { what: 'the barrier event' });
    stopListening();

    const base = (workflowId: string, workflowName: string, queueName: string) => ({
      workflowId,
      workflowName,
      queueName,
    });
    const expected = [
      { event: 'cancelled', ...base(cancelled.workflowId, 'EventTasks.ok', 'parked'), reason: 'cancelled' },
      { event: 'cancelled', ...base(timedOut.workflowId, 'EventTasks.slow', 'events'), reason: 'timed-out' },
      {
        event: 'completed',
        ...base(ok.workflowId, 'EventTasks.ok', 'events'),
        attempt: 1,
        durationMs: expect.any(Number),
      },
      {
        event: 'completed',
        ...base(barrier.workflowId, 'EventTasks.ok', 'events'),
        attempt: 1,
        durationMs: expect.any(Number),
      },
      { event: 'dead-lettered', ...base(deadLettered.workflowId, 'EventTasks.ok', 'parked') },
      {
        event: 'deduplicated',
        ...base(holder.workflowId, 'EventTasks.ok', 'parked'),
        deduplicationId: 'key',
        outcome: 'rejected',
      },
      {
        event: 'failed',
        ...base(failed.workflowId, 'EventTasks.fail', 'events'),
        attempt: 2,
        durationMs: expect.any(Number),
        error: expect.objectContaining({ name: 'Error', message: 'boom' }),
      },
      { event: 'recovered', ...base(recovered.workflowId, 'EventTasks.ok', 'parked') },
    ].sort((a, b) => `${a.event}${a.workflowId}`.localeCompare(`${b.event}${b.workflowId}`));
    for (const recorder of recorders()) expect(sortedEvents(recorder)).toEqual(expected);
    expect(deduplicated).toEqual([
      { queueName: 'parked', deduplicationId: 'key', existingWorkflowId: holder.workflowId, outcome: 'rejected' },
    ]);
  });

  it('logs a throwing or rejecting listener once per throw and keeps the worker going', async () => {
    const before = recorders()[0].events.length;
    const thrown = logger.errors.filter((line) => line.includes('listener throws')).length;
    const handle = await queues.enqueue('events', tasks.ok, ['after faults']);
    await expect(handle.getResult()).resolves.toBe('after faults');
    await waitFor(() => logger.errors.filter((line) => line.includes('listener rejects')).length === 3, {
      what: 'the rejection of the third completed event to be logged',
    });
    expect(logger.errors.filter((line) => line.includes('listener throws')).length).toBe(thrown + 1);
    expect(logger.errors.filter((line) => line.includes('listener throws'))[0]).toContain('FaultyListener.throws');
    expect(recorders()[0].events.length).toBe(before + 1);
  });
});
