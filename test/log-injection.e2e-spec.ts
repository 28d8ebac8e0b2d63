/**
 * Nothing a caller or a workflow body chooses can forge a log line: a workflow ID, a name or an error message with
 * line breaks or terminal escapes is logged on one line, its control characters escaped, and a 500's stack keeps its
 * own lines with the error's message escaped. The application's logger receives what the module logs.
 */
import { Controller, Get, INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DedupExceptionFilter, DedupQueueError, DedupQueueModule, QueueService, Workflow } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { CapturingLogger } from './support/capturing-logger';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

const FORGED = '\n[Nest] 1  - 01/01/2030, 00:00:00     LOG [DedupQueueScheduler] Workflow payout-1 succeeded';

@Injectable()
class FailingTasks {
  @Workflow()
  async fail(message: string): Promise<never> {
    throw new Error(message);
  }
}

@Controller('boom')
class BoomController {
  @Get()
  boom(): never {
    throw new DedupQueueError(`unexpected${FORGED}`);
  }
}

describe('log lines that nothing can forge', () => {
  const schema = uniqueSchema('log_lines');
  const logger = new CapturingLogger();
  let pool: Pool;
  let app: INestApplication;

  beforeAll(async () => {
    pool = testPool();
    const module = await Test.createTestingModule({
      imports: [DedupQueueModule.forRoot({ connection: { url: databaseUrl() }, schema, queues: [{ name: 'tasks' }] })],
      providers: [FailingTasks],
      controllers: [BoomController],
    })
      .setLogger(logger)
      .compile();
    app = module.createNestApplication({ logger });
    app.useGlobalFilters(new DedupExceptionFilter());
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('logs a failed workflow whose ID and error message hold line breaks and escapes on one line', async () => {
    const queues = app.get(QueueService);
    const workflowId = `order-7${FORGED}`;
    const handle = await queues.enqueue('tasks', app.get(FailingTasks).fail, [`card declined\r${FORGED}\u001b[2J`], {
      workflowId,
    });
    await expect(handle.getResult()).rejects.toThrow(/card declined/);
    const [line] = await waitFor(() => {
      const found = logger.matching(/failed: card declined/);
      return found.length > 0 && found;
    });
    expect(line.message).not.toMatch(/[\n\r\u001b]/);
    expect(line.message).toBe(
      `Workflow FailingTasks.fail (order-7\\n[Nest] 1  - 01/01/2030, 00:00:00     LOG [DedupQueueScheduler] ` +
        `Workflow payout-1 succeeded) failed: card declined\\r\\n[Nest] 1  - 01/01/2030, 00:00:00     LOG ` +
        `[DedupQueueScheduler] Workflow payout-1 succeeded\\u001b[2J`,
    );
  });

  it('logs a 500 with the message escaped, in the message and in the stack', async () => {
    await request(app.getHttpServer()).get('/boom').expect(500);
    const [line] = logger.matching(/^unexpected/);
    const [message, ...stack] = line.message.split('\n');
    expect(message).toBe(`unexpected${FORGED.replace('\n', '\\n')}`);
    expect(stack[0]).toBe(`DedupQueueError: unexpected${FORGED.replace('\n', '\\n')}`);
    expect(stack[1]).toMatch(/^\s+at /);
    expect(logger.matching(/^\[Nest\]/)).toEqual([]);
  });
});
