/**
 * What forking costs (issue 31, item 6, for the closing note): a fork of a failed run with 1,000 recorded steps (the
 * `fork` call, then the fork's run, which replays the 999 steps it copied and runs the failed one again), and
 * `forkMany` over 10,000 failed runs of three steps each (into a paused queue: the forks are only made). The failed
 * runs are written by SQL, as the history and the steps hold them, so that only the fork is measured. Prints the
 * times; asserts what was copied.
 */
import { Injectable } from '@nestjs/common';
import { Step, Workflow } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { QueueApp, useQueueApp } from './support/queue-app';

@Injectable()
class LongTasks {
  steps = 0;

  @Step()
  async step(i: number): Promise<number> {
    this.steps += 1;
    return i;
  }

  /** `n` steps; its sum. */
  @Workflow()
  async long(n: number): Promise<number> {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += await this.step(i);
    return sum;
  }
}

/** A failed run of `long(steps)` in the history, whose last recorded step failed. */
async function writeFailedRuns(pool: Pool, schema: string, queue: string, count: number, steps: number) {
  await pool.query(
    `WITH runs AS (
       INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, error,
                                                 attempts, created_at, completed_at, deduplication_id)
       SELECT $1 || '-' || n, $1, 'LongTasks.long', 'ERROR',
              json_build_array($3::int), '{"name":"Error","message":"the last step failed"}', 1, now(), now(),
              $1 || '-key-' || n
       FROM generate_series(1, $2::int) AS n
       RETURNING workflow_id, created_at
     )
     INSERT INTO "${schema}".steps (workflow_id, step_index, step_name, output, error, started_at, completed_at,
                                    queue_name, workflow_created_at)
     SELECT r.workflow_id, i, 'LongTasks.step', CASE WHEN i < $3 - 1 THEN to_json(i) END,
            CASE WHEN i = $3 - 1 THEN '{"name":"Error","message":"the step failed"}'::json END, now(), now(), $1,
            r.created_at
     FROM runs AS r, generate_series(0, $3::int - 1) AS i`,
    [queue, count, steps],
  );
}

describe('the cost of forking', () => {
  const suite = useQueueApp('fork_cost', { queues: [{ name: 'long' }, { name: 'many' }], pollIntervalMs: 100 }, [
    LongTasks,
  ]);
  let pool: Pool;
  let app: QueueApp;
  let schema: string;

  beforeAll(() => {
    ({ pool, app, schema } = suite);
  });

  it('forks a run with 1,000 steps, and runs the fork, replaying 999 of them', async () => {
    await writeFailedRuns(pool, schema, 'long', 1, 1000);
    const tasks = app.get(LongTasks);
    const forkStarted = performance.now();
    const fork = await app.queues.fork('long-1');
    const forkMs = performance.now() - forkStarted;
    const result = await fork.getResult({ timeoutMs: 60_000 });
    const runMs = performance.now() - forkStarted - forkMs;
    expect(result).toBe((999 * 1000) / 2);
    expect(tasks.steps).toBe(1);
    const copied = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".steps WHERE workflow_id = $1`, [
      fork.workflowId,
    ]);
    expect(copied.rows[0].n).toBe(1000);
    console.log(
      `[fork-cost] fork of a run with 1,000 steps: fork() ${forkMs.toFixed(1)} ms (999 steps copied), ` +
        `its run ${runMs.toFixed(0)} ms (999 replayed, 1 run)`,
    );
  }, 120_000);

  it('forks 10,000 failed runs with forkMany', async () => {
    await writeFailedRuns(pool, schema, 'many', 10_000, 3);
    await app.queues.pauseQueue('many');
    const started = performance.now();
    const results = await app.queues.forkMany({ queueName: 'many', status: 'ERROR' });
    const ms = performance.now() - started;
    expect(results).toHaveLength(10_000);
    expect(results.filter((result) => result.outcome === 'forked')).toHaveLength(10_000);
    const copied = await pool.query(
      `SELECT count(*)::int AS forks, sum((SELECT count(*) FROM "${schema}".steps AS s
                                           WHERE s.queue_name = 'many' AND s.workflow_id = w.workflow_id))::int AS steps
       FROM "${schema}".workflow_queue AS w WHERE w.queue_name = 'many' AND w.forked_from IS NOT NULL`,
    );
    expect(copied.rows[0]).toEqual({ forks: 10_000, steps: 20_000 });
    const again = performance.now();
    const retried = await app.queues.forkMany({ queueName: 'many', status: 'ERROR' });
    const againMs = performance.now() - again;
    expect(retried.filter((result) => result.outcome === 'existing')).toHaveLength(10_000);
    console.log(
      `[fork-cost] forkMany over 10,000 failed runs (3 steps each, 2 copied): ${ms.toFixed(0)} ms ` +
        `(${((ms / 10_000) * 1000).toFixed(0)} µs a fork); the same call again (all existing): ${againMs.toFixed(0)} ms`,
    );
  }, 300_000);
});
