import type { QueueDatabase } from '../connection/queue-database';

/**
 * On Citus, an executor's lease in each queue it claims from: a row of `executor_leases` (migration 24) per stored
 * queue name, on the queue's node, with an expiry the heartbeat renews. A claim locks its row there
 * (`lockSql`, `FOR KEY SHARE`: no round trip to the coordinator) and claims nothing when the
 * row is gone or expired; the recovery of a queue first deletes the queue's expired rows (`deleteExpiredSql`, which
 * waits for the claims holding them) and then treats as orphans only the runs of executors without a row in the
 * queue (`noLeaseInQueueSql`). So no claim commits under a lease that recovery deleted, and a run is recovered
 * only once no claim of its executor can still be in flight in its queue.
 */
export class CitusExecutorLeases {
  private readonly leases: string;
  /** $1 queue, $2 executor: its lease in the queue, if unexpired, locked until the transaction ends. */
  readonly lockSql: string;
  /** $1 queue: the queue's expired leases deleted, returning their executors. */
  readonly deleteExpiredSql: string;

  constructor(private readonly database: QueueDatabase) {
    this.leases = `${database.schemaSql}.executor_leases`;
    this.lockSql = `SELECT 1 FROM ${this.leases} WHERE queue_name = $1 AND executor_id = $2 AND expires_at > now()
       FOR KEY SHARE`;
    this.deleteExpiredSql = `DELETE FROM ${this.leases} WHERE queue_name = $1 AND expires_at < now()
       RETURNING executor_id`;
  }

  /**
   * A condition on an active row `w` of queue `$queueParam`: its executor holds no lease in the queue (a router
   * subquery: the leases are co-located with the active rows).
   */
  noLeaseInQueueSql(queueParam: string): string {
    return `NOT EXISTS (SELECT 1 FROM ${this.leases} AS l WHERE l.queue_name = ${queueParam} AND l.executor_id = w.executor_id)`;
  }

  /** Takes (or renews) the executor's lease in each of `queues` for `leaseMs`: one router upsert per queue. */
  async take(executorId: string, queues: readonly string[], leaseMs: number): Promise<void> {
    for (const queue of queues) {
      await this.database.query(
        `INSERT INTO ${this.leases} (queue_name, executor_id, expires_at)
         VALUES ($1, $2, now() + $3::float8 * interval '1 millisecond')
         ON CONFLICT (queue_name, executor_id) DO UPDATE SET expires_at = excluded.expires_at`,
        [queue, executorId, leaseMs],
        { idempotent: true },
      );
    }
  }

  /**
   * Renews the executor's leases in `queues` for `leaseMs` (one statement on the nodes holding them); false when one
   * of them is gone: a recovery found it expired, and may have taken the executor's runs in that queue.
   */
  async renew(executorId: string, queues: readonly string[], leaseMs: number): Promise<boolean> {
    if (queues.length === 0) return true;
    const rows = await this.database.query(
      `UPDATE ${this.leases} SET expires_at = now() + $3::float8 * interval '1 millisecond'
       WHERE queue_name = ANY($1::text[]) AND executor_id = $2
       RETURNING queue_name`,
      [queues, executorId, leaseMs],
      { idempotent: true },
    );
    return rows.length === new Set(queues).size;
  }

  /** Ends the executor's leases in `queues` at once, so that peers recover what it leaves at their next sweep. */
  async remove(executorId: string, queues: readonly string[]): Promise<void> {
    if (queues.length === 0) return;
    await this.database.query(
      `UPDATE ${this.leases} SET expires_at = '-infinity' WHERE queue_name = ANY($1::text[]) AND executor_id = $2`,
      [queues, executorId],
      { idempotent: true },
    );
  }
}
