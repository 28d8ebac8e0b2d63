/**
 * A cancel that reaches the worker while the claim that took the workflow is still on its way back (the claim
 * committed, its answer not yet read) is not lost: when the claim returns, the cancelled workflow is dropped instead
 * of started. The claimer is the module's own, held after Postgres answered (Test.overrideProvider).
 */
import { Injectable } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { DedupQueueModule, QueueService, Workflow } from 'nest-dedup-queue';
import { QueueDatabase, WorkflowClaimer, type ClaimRequest, type ClaimResult } from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { Gate } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

@Injectable()
class RunTasks {
  readonly ran: string[] = [];

  @Workflow()
  async record(label: string): Promise<string> {
    this.ran.push(label);
    return label;
  }
}

/** The module's claimer; while `holding`, a claim that took workflows waits for `gate` before it answers. */
class HeldClaimer extends WorkflowClaimer {
  holding = true;
  readonly gate = new Gate();
  readonly held: string[] = [];

  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(request);
    if (this.holding && result.workflows.length > 0) {
      this.held.push(...result.workflows.map((workflow) => workflow.workflowId));
      await this.gate.wait();
    }
    return result;
  }
}

describe('a cancel that arrives while its claim is in flight', () => {
  const schema = uniqueSchema('cancel_claim');
  let pool: Pool;
  let module: TestingModule;

  beforeAll(async () => {
    pool = testPool();
    module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          queues: [{ name: 'tasks', workerConcurrency: 1 }],
        }),
      ],
      providers: [RunTasks],
    })
      .overrideProvider(WorkflowClaimer)
      .useFactory({ factory: (database: QueueDatabase) => new HeldClaimer(database), inject: [QueueDatabase] })
      .compile();
    await module.init();
  });

  afterAll(async () => {
    module?.get<WorkflowClaimer, HeldClaimer>(WorkflowClaimer).gate.open();
    await module?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('drops the cancelled workflow when the claim returns, and runs the next one', async () => {
    const queues = module.get(QueueService);
    const tasks = module.get(RunTasks);
    const claimer = module.get<WorkflowClaimer, HeldClaimer>(WorkflowClaimer);
    const cancelled = await queues.enqueue('tasks', tasks.record, ['cancelled']);
    await waitFor(() => claimer.held.includes(cancelled.workflowId), { what: 'the claim to take it and be held' });
    const { rows: claimed } = await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [
      cancelled.workflowId,
    ]);
    expect(claimed).toEqual([{ status: 'PENDING' }]);

    await queues.cancel(cancelled.workflowId);
    claimer.holding = false;
    claimer.gate.open();
    const next = await queues.enqueue('tasks', tasks.record, ['next']);

    await expect(next.getResult({ timeoutMs: 20_000 })).resolves.toBe('next');
    expect(tasks.ran).toEqual(['next']);
    await expect(cancelled.getStatus()).resolves.toMatchObject({ status: 'CANCELLED' });
  });
});
