/**
 * The one-server outcome statement is sent with only the parts its batch needs (issue 32): a batch of successes
 * without return values carries no retry update and no status, output or error arrays; a batch that mixes return
 * values, errors (with and without `releaseKeyOnError`), deduplication windows and a retry carries them, and every
 * outcome is recorded as before.
 */
import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DedupQueueModule, QueueDeduplicatedError, QueueService, Workflow, workflowContext } from 'nest-dedup-queue';
import type { INestApplication } from '@nestjs/common';
import type { Pool } from 'pg';
import { GatedRuns } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { captureStatements } from './support/statement-capture';
import { waitFor } from './support/wait-for';

const HOUR = 3_600_000;

@Injectable()
class OutcomeTasks extends GatedRuns<{ label: string }> {
  @Workflow()
  async finish(label: string, gate: string, how: 'value' | 'nothing' | 'fail'): Promise<string | undefined> {
    this.runs.push({ label });
    await this.gate(gate).wait();
    if (how === 'fail') throw new Error(`${label} failed`);
    return how === 'value' ? label : undefined;
  }

  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 5, jitter: false } })
  async failsOnce(label: string, gate: string): Promise<string> {
    this.runs.push({ label });
    await this.gate(gate).wait();
    if (workflowContext().attempt === 1) throw new Error(`${label}: the first attempt fails`);
    return `${label} retried`;
  }
}

const schema = uniqueSchema('outcome_parts');
const capture = captureStatements(/AS end_status/);
let pool: Pool;
let app: INestApplication;
let queues: QueueService;
let tasks: OutcomeTasks;

beforeAll(async () => {
  pool = testPool();
  const module = await Test.createTestingModule({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: databaseUrl() },
        schema,
        queues: [{ name: 'parts', workerConcurrency: 32 }],
        worker: { queues: ['parts'] },
        shutdownGraceMs: 500,
      }),
    ],
    providers: [OutcomeTasks],
  }).compile();
  app = module.createNestApplication({ logger: false });
  await app.init();
  queues = app.get(QueueService);
  tasks = app.get(OutcomeTasks);
});

afterAll(async () => {
  tasks?.openAll();
  capture.restore();
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

/** Waits until every label has started a run (so that their outcomes come together once the gate opens). */
async function allRunning(labels: string[]): Promise<void> {
  await waitFor(() => labels.every((label) => tasks.ran(label).length > 0), { what: `${labels.length} runs to start` });
}

async function statusOf(handle: { workflowId: string }) {
  return (await queues.retrieve(handle.workflowId)).getStatus();
}

it('records a batch of successes without return values with the smallest statement, keys kept for their windows', async () => {
  const labels = Array.from({ length: 12 }, (_, i) => `plain-${i}`);
  const handles = await Promise.all(
    labels.map((label, i) =>
      queues.enqueue('parts', tasks.finish, [label, 'plain', 'nothing'], {
        deduplicationId: label,
        ...(i % 2 === 0 ? { deduplicationWindowMs: HOUR } : {}),
      }),
    ),
  );
  await allRunning(labels);
  capture.captured.length = 0;
  capture.capturing = true;
  tasks.gate('plain').open();
  for (const handle of handles) await expect(handle.getResult()).resolves.toBeUndefined();
  capture.capturing = false;

  expect(capture.captured.length).toBeGreaterThan(0);
  for (const statement of capture.captured) {
    expect(statement.text).not.toMatch(/retried AS/);
    expect(statement.text).toMatch(
      /'SUCCESS'::text AS end_status, NULL::json AS end_output,\s+NULL::json AS end_error/,
    );
    // IDs, runs, queues (each once), executor, channel, and the attached claim's four.
    expect(statement.values.length).toBeLessThanOrEqual(9);
  }
  // The windowed keys are still held by the finished workflows; the others are free again.
  for (const [i, label] of labels.entries()) {
    const again = queues.enqueue('parts', tasks.finish, [`${label}-again`, 'plain', 'nothing'], {
      deduplicationId: label,
    });
    if (i % 2 === 0) await expect(again).rejects.toBeInstanceOf(QueueDeduplicatedError);
    else await expect((await again).getResult()).resolves.toBeUndefined();
  }
});

it('records a mixed batch: return values, errors, windows with and without releaseKeyOnError, and a retry', async () => {
  const enqueue = (label: string, how: 'value' | 'nothing' | 'fail', options = {}) =>
    queues.enqueue('parts', tasks.finish, [label, 'mixed', how], { deduplicationId: label, ...options });
  const value = await enqueue('mixed-value', 'value');
  const nothing = await enqueue('mixed-nothing', 'nothing', { deduplicationWindowMs: HOUR });
  const failedKeepsKey = await enqueue('mixed-fail-kept', 'fail', { deduplicationWindowMs: HOUR });
  const failedFreesKey = await enqueue('mixed-fail-freed', 'fail', {
    deduplicationWindowMs: HOUR,
    releaseKeyOnError: true,
  });
  const retried = await queues.enqueue('parts', tasks.failsOnce, ['mixed-retry', 'mixed'], {
    deduplicationId: 'mixed-retry',
  });
  await allRunning(['mixed-value', 'mixed-nothing', 'mixed-fail-kept', 'mixed-fail-freed', 'mixed-retry']);
  capture.captured.length = 0;
  capture.capturing = true;
  tasks.gate('mixed').open();

  await expect(value.getResult()).resolves.toBe('mixed-value');
  await expect(nothing.getResult()).resolves.toBeUndefined();
  await expect(failedKeepsKey.getResult()).rejects.toThrow('mixed-fail-kept failed');
  await expect(failedFreesKey.getResult()).rejects.toThrow('mixed-fail-freed failed');
  await expect(retried.getResult()).resolves.toBe('mixed-retry retried');
  capture.capturing = false;

  expect(await statusOf(failedKeepsKey)).toMatchObject({ status: 'ERROR' });
  expect(await statusOf(retried)).toMatchObject({ status: 'SUCCESS', attempts: 2 });
  expect(tasks.ran('mixed-retry')).toHaveLength(2);
  // The statement that recorded the retry carried the retry update.
  expect(capture.captured.some((statement) => /retried AS/.test(statement.text))).toBe(true);

  await expect(enqueue('mixed-nothing', 'nothing')).rejects.toBeInstanceOf(QueueDeduplicatedError);
  await expect(enqueue('mixed-fail-kept', 'nothing')).rejects.toBeInstanceOf(QueueDeduplicatedError);
  const freedAgain = await enqueue('mixed-fail-freed', 'nothing');
  await expect(freedAgain.getResult()).resolves.toBeUndefined();
});
