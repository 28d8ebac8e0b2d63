import { Test, TestingModule } from '@nestjs/testing';
import { DedupQueueModule, QueueService } from 'nest-dedup-queue';
import {
  OutcomeWriter,
  QueueDatabase,
  WorkflowClaimer,
  type AttachedClaim,
  type ClaimRequest,
  type ClaimResult,
  type WorkflowOutcome,
} from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { DoublingTasks } from './fixtures/doubling-tasks';

/** The module's own writer, recording what it was asked to write (and whether Postgres took it). */
class RecordingOutcomeWriter extends OutcomeWriter {
  readonly written: { outcome: WorkflowOutcome; queueName: string; recorded: boolean }[] = [];

  override async write(outcome: WorkflowOutcome, queueName: string): Promise<boolean> {
    const recorded = await super.write(outcome, queueName);
    this.written.push({ outcome, queueName, recorded });
    return recorded;
  }
}

/** The module's own claimer, counting the workflows each claim took: alone, or attached to recorded outcomes. */
class CountingClaimer extends WorkflowClaimer {
  readonly claimed: string[] = [];

  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(request);
    this.claimed.push(...result.workflows.map((workflow) => workflow.workflowId));
    return result;
  }

  override attachable(request: ClaimRequest): AttachedClaim {
    const attached = super.attachable(request);
    return {
      ...attached,
      read: (rowsJson) => {
        const workflows = attached.read(rowsJson);
        this.claimed.push(...workflows.map((workflow) => workflow.workflowId));
        return workflows;
      },
    };
  }
}

describe('collaborators are Nest providers (Test.overrideProvider)', () => {
  const schema = uniqueSchema('overrides');
  let pool: Pool;
  let module: TestingModule;
  let writer: RecordingOutcomeWriter;
  let claimer: CountingClaimer;

  beforeAll(async () => {
    pool = testPool();
    module = await Test.createTestingModule({
      imports: [DedupQueueModule.forRoot({ connection: { url: databaseUrl() }, schema, queues: [{ name: 'tasks' }] })],
      providers: [DoublingTasks],
    })
      .overrideProvider(OutcomeWriter)
      .useClass(RecordingOutcomeWriter)
      .overrideProvider(WorkflowClaimer)
      .useFactory({
        factory: (database: QueueDatabase) => new CountingClaimer(database),
        inject: [QueueDatabase],
      })
      .compile();
    await module.init();
    writer = module.get(OutcomeWriter);
    claimer = module.get(WorkflowClaimer);
  });

  afterAll(async () => {
    await module?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs workflows through the replacements: the claim and the outcome go through them, against Postgres', async () => {
    expect(writer).toBeInstanceOf(RecordingOutcomeWriter);
    expect(claimer).toBeInstanceOf(CountingClaimer);
    const queues = module.get(QueueService);
    const tasks = module.get(DoublingTasks);
    const handles = await Promise.all([1, 2, 3].map((value) => queues.enqueue('tasks', tasks.double, [value])));

    expect(await Promise.all(handles.map((handle) => handle.getResult()))).toEqual([2, 4, 6]);

    const ids = handles.map((handle) => handle.workflowId).sort();
    expect([...claimer.claimed].sort()).toEqual(ids);
    expect(writer.written.map(({ outcome }) => outcome.workflowId).sort()).toEqual(ids);
    for (const { outcome, queueName, recorded } of writer.written) {
      expect({ status: outcome.status, queueName, recorded }).toEqual({
        status: 'SUCCESS',
        queueName: 'tasks',
        recorded: true,
      });
    }
    const { rows } = await pool.query(`SELECT status, count(*)::int AS n FROM "${schema}".workflows GROUP BY status`);
    expect(rows).toEqual([{ status: 'SUCCESS', n: 3 }]);
  });
});
