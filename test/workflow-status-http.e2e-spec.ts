/**
 * A workflow's status over HTTP, returned as it is by a controller like the one in docs/using-it.md: it carries the result once the
 * workflow succeeded, and a failure's name and message without the stack (the server's file paths), which stays in
 * the database for the dashboard.
 */
import { Controller, Get, INestApplication, Injectable, Param, UseFilters } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DedupExceptionFilter, DedupQueueModule, QueueService, Workflow, WorkflowStatusInfo } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';

class ReportMissingError extends Error {
  readonly code = 'REPORT_MISSING';
}

@Injectable()
class StatusTasks {
  @Workflow()
  async succeed(userId: string): Promise<{ userId: string; score: number }> {
    return { userId, score: 42 };
  }

  @Workflow()
  async fail(userId: string): Promise<never> {
    throw new ReportMissingError(`no report for ${userId}`);
  }
}

@Controller('workflows')
@UseFilters(DedupExceptionFilter)
class StatusController {
  constructor(private readonly queueService: QueueService) {}

  @Get(':workflowId')
  async status(@Param('workflowId') workflowId: string): Promise<WorkflowStatusInfo> {
    return (await this.queueService.retrieve(workflowId)).getStatus();
  }
}

describe('a workflow status returned over HTTP as it is', () => {
  const schema = uniqueSchema('status_http');
  let pool: Pool;
  let app: INestApplication;
  let queues: QueueService;

  beforeAll(async () => {
    pool = testPool();
    const module = await Test.createTestingModule({
      imports: [DedupQueueModule.forRoot({ connection: { url: databaseUrl() }, schema, queues: [{ name: 'tasks' }] })],
      controllers: [StatusController],
      providers: [StatusTasks],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    queues = app.get(QueueService);
  });

  afterAll(async () => {
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('carries the result once the workflow succeeded', async () => {
    const handle = await queues.enqueue('tasks', 'StatusTasks.succeed', ['u1']);
    await handle.getResult({ timeoutMs: 10_000 });
    const response = await request(app.getHttpServer()).get(`/workflows/${handle.workflowId}`).expect(200);
    expect(response.body).toMatchObject({
      workflowId: handle.workflowId,
      status: 'SUCCESS',
      queueName: 'tasks',
      result: { userId: 'u1', score: 42 },
      error: null,
    });
  });

  it("gives a failure's name, message and fields without the stack, which stays stored for operators", async () => {
    const handle = await queues.enqueue('tasks', 'StatusTasks.fail', ['u2']);
    await expect(handle.getResult({ timeoutMs: 10_000 })).rejects.toMatchObject({
      recordedError: { stack: expect.stringContaining(__filename) },
    });
    const response = await request(app.getHttpServer()).get(`/workflows/${handle.workflowId}`).expect(200);
    expect(response.body).toMatchObject({ status: 'ERROR' });
    expect(response.body.error).toEqual({
      name: 'Error',
      message: 'no report for u2',
      fields: { code: 'REPORT_MISSING' },
    });
    expect(response.body).not.toHaveProperty('result');
    expect(response.text).not.toContain(__dirname);
    expect(response.text).not.toMatch(/\bat \S+ \(/);
    const [listed] = await queues.list({ workflowName: 'StatusTasks.fail' });
    expect(listed?.error).not.toHaveProperty('stack');

    const stored = await pool.query(
      `SELECT error->>'stack' AS stack FROM "${schema}".workflows WHERE workflow_id = $1`,
      [handle.workflowId],
    );
    expect(stored.rows[0].stack).toContain(__filename);
  });

  it('answers 404 for an unknown workflow', async () => {
    await request(app.getHttpServer()).get('/workflows/no-such-workflow').expect(404);
  });
});
