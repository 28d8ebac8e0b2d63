import type { QueueLimits } from '../../interfaces/queue-options.interface';
import type { QueueDatabase } from '../connection/queue-database';

/** What was changed at run time for one queue; null limits mean "as declared". */
export interface QueueOverrides {
  paused: boolean;
  limits: QueueLimits;
}

interface QueueRow {
  queue_name: string;
  paused: boolean;
  concurrency: number | null;
  worker_concurrency: number | null;
  partition_concurrency: number | null;
  rate_limit: number | null;
  rate_period_ms: number | null;
  rate_per_partition: boolean | null;
}

/** The SQL of run-time queue control: pause/resume and limit overrides, announced to every process by NOTIFY. */
export class QueueControlStore {
  private readonly queues: string;

  constructor(private readonly database: QueueDatabase) {
    this.queues = `${database.schemaSql}.queues`;
  }

  async ensure(queueNames: string[]): Promise<void> {
    await this.database.query(
      `INSERT INTO ${this.queues} (queue_name) SELECT unnest($1::text[]) ON CONFLICT (queue_name) DO NOTHING`,
      [queueNames],
    );
  }

  async load(): Promise<Map<string, QueueOverrides>> {
    const rows = await this.database.query<QueueRow>(`SELECT * FROM ${this.queues}`, [], { idempotent: true });
    return new Map(rows.map((row) => [row.queue_name, toOverrides(row)]));
  }

  async setPaused(queueName: string, paused: boolean): Promise<void> {
    await this.update(queueName, 'paused = $2', [paused]);
  }

  /** Sets the given limits (null: back to the declared value); limits left out keep their current override. */
  async setLimits(queueName: string, limits: { [K in keyof QueueLimits]?: QueueLimits[K] | null }): Promise<void> {
    const columns: Array<[string, unknown]> = [];
    if (limits.concurrency !== undefined) columns.push(['concurrency', limits.concurrency]);
    if (limits.workerConcurrency !== undefined) columns.push(['worker_concurrency', limits.workerConcurrency]);
    if (limits.partitionConcurrency !== undefined) columns.push(['partition_concurrency', limits.partitionConcurrency]);
    if (limits.rateLimit !== undefined) {
      columns.push(
        ['rate_limit', limits.rateLimit?.limit ?? null],
        ['rate_period_ms', limits.rateLimit?.periodMs ?? null],
        ['rate_per_partition', limits.rateLimit?.perPartition ?? null],
      );
    }
    if (columns.length === 0) return;
    await this.update(
      queueName,
      columns.map(([column], index) => `${column} = $${index + 2}`).join(', '),
      columns.map(([, value]) => value),
    );
  }

  /**
   * Changes the queue's row and announces it. The time comes from the inserted row (`excluded`): Citus refuses a
   * function that is not IMMUTABLE in `DO UPDATE SET`, and evaluates `now()` in `VALUES` itself.
   */
  private async update(queueName: string, assignments: string, values: unknown[]): Promise<void> {
    await this.database.query(
      `WITH changed AS (
         INSERT INTO ${this.queues} AS q (queue_name, updated_at) VALUES ($1, now())
         ON CONFLICT (queue_name) DO UPDATE SET ${assignments}, updated_at = excluded.updated_at
         RETURNING q.queue_name
       )
       SELECT pg_notify($${values.length + 2}, queue_name)::text FROM changed`,
      [queueName, ...values, this.database.controlChannel],
    );
  }
}

function toOverrides(row: QueueRow): QueueOverrides {
  const limits: QueueLimits = {};
  if (row.concurrency !== null) limits.concurrency = row.concurrency;
  if (row.worker_concurrency !== null) limits.workerConcurrency = row.worker_concurrency;
  if (row.partition_concurrency !== null) limits.partitionConcurrency = row.partition_concurrency;
  if (row.rate_limit !== null && row.rate_period_ms !== null) {
    limits.rateLimit = { limit: row.rate_limit, periodMs: row.rate_period_ms };
    if (row.rate_per_partition !== null) limits.rateLimit.perPartition = row.rate_per_partition;
  }
  return { paused: row.paused, limits };
}
