/**
 * A claim locks only the rows it takes. Two claims of a small queue in flight at once (each in a transaction not yet
 * committed, as a claim is while its outcome statement's commit is flushed) each take their full count, and every
 * row neither took stays free for a third. On a small queue without statistics the planner sorts the ready rows: a
 * claim that locked each due row before its LIMIT (a lock inside the probe of the active row) took its 8 and held
 * the other 112, and the second claim, skipping them, came back empty, which marks the queue empty for its worker.
 */
import { Injectable } from '@nestjs/common';
import { Workflow } from 'nest-dedup-queue';
import { WorkflowClaimer, type ClaimRequest } from 'nest-dedup-queue/testing';
import type { PoolClient } from 'pg';
import { useQueueApp } from './support/queue-app';

const QUEUED = 120;
const CLAIMED = 8;
const EXECUTOR = 'held-claims';

@Injectable()
class SmallTasks {
  @Workflow()
  async noop(): Promise<void> {}
}

describe('a claim locks only the rows it takes', () => {
  const suite = useQueueApp<SmallTasks>(
    'claim_locks',
    { worker: false, queues: [{ name: 'small', workerConcurrency: CLAIMED }] },
    [SmallTasks],
    { tasks: SmallTasks },
  );

  it(`lets two claims in flight take ${CLAIMED} each of ${QUEUED} queued, and leaves the rest unlocked`, async () => {
    const { app, pool, schema, tasks } = suite;
    await app.queues.enqueueMany(
      'small',
      tasks.noop,
      Array.from({ length: QUEUED }, () => ({ args: [] })),
    );
    await pool.query(
      `INSERT INTO "${schema}".executors (executor_id, hostname, pid, queues, workflows) VALUES ($1, 'test', 1, '{small}', '[]')`,
      [EXECUTOR],
    );
    const claimer = app.get(WorkflowClaimer);
    const request = {
      queue: { name: 'small', workerConcurrency: CLAIMED },
      executorId: EXECUTOR,
      limit: CLAIMED,
      claimKeys: ['1:SmallTasks.noop'],
    } as unknown as ClaimRequest;
    const open: PoolClient[] = [];
    const claimInOpenTransaction = async (): Promise<string[]> => {
      const client = await pool.connect();
      open.push(client);
      const claim = claimer.attachable(request);
      await client.query('BEGIN');
      const { rows } = await client.query<{ workflow_id: string }>(
        `WITH ${claim.ctes(1)} SELECT workflow_id FROM claimed`,
        claim.params,
      );
      return rows.map((row) => row.workflow_id);
    };
    try {
      const first = await claimInOpenTransaction();
      const second = await claimInOpenTransaction();
      expect(first).toHaveLength(CLAIMED);
      expect(second).toHaveLength(CLAIMED);
      expect(second.filter((id) => first.includes(id))).toEqual([]);
      const { rows } = await pool.query<{ free: number }>(
        `SELECT count(*)::int AS free FROM (
           SELECT 1 FROM "${schema}".workflow_queue WHERE queue_name = 'small' AND status = 'ENQUEUED'
           FOR UPDATE SKIP LOCKED) AS unlocked`,
      );
      expect(rows[0].free).toBe(QUEUED - 2 * CLAIMED);
    } finally {
      for (const client of open) {
        await client.query('ROLLBACK');
        client.release();
      }
    }
    const { rows: after } = await pool.query<{ ready: number; enqueued: number }>(
      `SELECT (SELECT count(*)::int FROM "${schema}".workflow_ready) AS ready,
              (SELECT count(*)::int FROM "${schema}".workflow_queue WHERE status = 'ENQUEUED') AS enqueued`,
    );
    expect(after[0]).toEqual({ ready: QUEUED, enqueued: QUEUED });
  });
});
