import type { Pool, PoolClient } from 'pg';

/**
 * Makes the ready rows (`workflow_ready`, migration 025) of `schema` match its ENQUEUED rows after a test changed
 * `workflow_queue` by hand: the module writes or deletes one with every move into or out of ENQUEUED, and claims only
 * what has one. Writes the missing ones and deletes those of rows no longer ENQUEUED; returns how many it changed.
 */
export async function syncReadyRows(db: Pick<Pool, 'query'> | PoolClient, schema: string): Promise<number> {
  const stray = await db.query(
    `DELETE FROM "${schema}".workflow_ready AS r
     WHERE NOT EXISTS (SELECT 1 FROM "${schema}".workflow_queue AS w
                       WHERE w.queue_name = r.queue_name AND w.workflow_id = r.workflow_id AND w.status = 'ENQUEUED')`,
  );
  const missing = await db.query(
    `INSERT INTO "${schema}".workflow_ready (queue_name, priority, seq, workflow_id, partition_key)
     SELECT w.queue_name, w.priority, w.seq, w.workflow_id, w.partition_key FROM "${schema}".workflow_queue AS w
     WHERE w.status = 'ENQUEUED'
       AND NOT EXISTS (SELECT 1 FROM "${schema}".workflow_ready AS r
                       WHERE r.queue_name = w.queue_name AND r.workflow_id = w.workflow_id)`,
  );
  return (stray.rowCount ?? 0) + (missing.rowCount ?? 0);
}

/**
 * Makes `executorId` a dead executor whose lease expired an hour ago (a row of `executors`, written or aged, and on
 * Citus an expired lease in each of `queues`), so that the next sweep deletes it and recovers its PENDING runs, as it
 * does for a process that died: runs of an executor without a row are recovered only when a worker starts
 * (`ExecutorStore.recoverOrphans`).
 */
export async function expireExecutor(
  db: Pick<Pool, 'query'> | PoolClient,
  schema: string,
  executorId: string,
  queues: string[] = [],
): Promise<void> {
  await db.query(
    `INSERT INTO "${schema}".executors (executor_id, hostname, pid, started_at, heartbeat_at)
     VALUES ($1, 'gone', 0, now() - interval '2 hours', now() - interval '1 hour')
     ON CONFLICT (executor_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`,
    [executorId],
  );
  for (const queue of queues) {
    await db.query(
      `INSERT INTO "${schema}".executor_leases (queue_name, executor_id, expires_at)
       VALUES ($1, $2, now() - interval '1 hour')
       ON CONFLICT (queue_name, executor_id) DO UPDATE SET expires_at = excluded.expires_at`,
      [queue, executorId],
    );
  }
}
