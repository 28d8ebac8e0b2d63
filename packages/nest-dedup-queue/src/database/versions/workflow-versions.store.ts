import type { QueueDatabase } from '../connection/queue-database';
import type { WorkflowRegistration } from './workflow-registrations';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { workflowTables } from '../tables/workflow-tables';

/** A live executor and what it runs; `queues` and `workflows` are null for an executor of a release before 1.1. */
export interface LiveExecutor {
  executorId: string;
  queues: string[] | null;
  workflows: WorkflowRegistration[] | null;
}

/** The unfinished runs of one name and version in one queue, by state. */
export interface UnfinishedRunCount {
  queueName: string;
  workflowName: string;
  version: number;
  /** ENQUEUED (DELAYED included) or WAITING: they need a worker that registers them to go on. */
  waiting: number;
  /** PENDING: running now. */
  running: number;
  /** Dead letters, waiting for `resume` (a run parked by a code change among them). */
  deadLettered: number;
}

/**
 * The SQL behind workflow versions: the names and versions processes register (`registered_workflows`, and each
 * live executor's row), and the unfinished runs per queue, name and version. The registrations live on the
 * coordinator on Citus; the count of unfinished runs reads every queue (it is a report, like the metrics' gauges).
 */
export class WorkflowVersionStore {
  private readonly registered: string;
  private readonly executors: string;
  private readonly active: string;

  constructor(private readonly database: QueueDatabase) {
    this.registered = `${database.schemaSql}.registered_workflows`;
    this.executors = `${database.schemaSql}.executors`;
    this.active = workflowTables(database.schemaSql).active;
  }

  /**
   * Remembers the names and versions this process registers (an SQL enqueue refuses a name nobody registered). NOTE:
   * the renewal's time is the inserted row's default (`now()`), which Citus accepts, unlike `now()` in `DO UPDATE SET`.
   */
  async recordRegistrations(registrations: WorkflowRegistration[]): Promise<void> {
    if (registrations.length === 0) return;
    await this.database.query(
      `INSERT INTO ${this.registered} AS r (workflow_name, version)
       SELECT * FROM unnest($1::text[], $2::int[]) ORDER BY 1, 2
       ON CONFLICT (workflow_name, version) DO UPDATE SET last_registered_at = excluded.last_registered_at`,
      [registrations.map((r) => r.name), registrations.map((r) => r.version)],
      { idempotent: true },
    );
  }

  /** The executors whose lease was renewed within `leaseMs`, with what they run. */
  async liveExecutors(leaseMs: number): Promise<LiveExecutor[]> {
    const rows = await this.database.query<{
      executor_id: string;
      queues: string[] | null;
      workflows: WorkflowRegistration[] | null;
    }>(
      `SELECT executor_id, queues, workflows FROM ${this.executors}
       WHERE heartbeat_at > now() - $1::float8 * interval '1 millisecond'`,
      [leaseMs],
      { idempotent: true },
    );
    return rows.map((row) => ({ executorId: row.executor_id, queues: row.queues, workflows: row.workflows }));
  }

  /**
   * The version a run of `workflowName` gets when its enqueuing process does not register that name: the highest
   * any live executor registers, else the highest any process ever registered; undefined when none did.
   */
  async highestRegisteredVersion(workflowName: string, leaseMs: number): Promise<number | undefined> {
    const [row] = await this.database.query<{ version: number | null }>(
      `SELECT coalesce(
         (SELECT max((r.value ->> 'version')::int) FROM ${this.executors} AS e,
                 jsonb_array_elements(e.workflows) AS r(value)
          WHERE e.heartbeat_at > now() - $2::float8 * interval '1 millisecond' AND r.value ->> 'name' = $1),
         (SELECT max(version) FROM ${this.registered} WHERE workflow_name = $1)) AS version`,
      [workflowName, leaseMs],
      { idempotent: true },
    );
    return row?.version ?? undefined;
  }

  /** The unfinished runs (and dead letters) of every queue, per queue, name and version. */
  async unfinishedRuns(): Promise<UnfinishedRunCount[]> {
    const rows = await this.database.query<{
      queue_name: string;
      workflow_name: string;
      workflow_version: number;
      waiting: number;
      running: number;
      dead_lettered: number;
    }>(
      `SELECT queue_name, workflow_name, workflow_version,
              count(*) FILTER (WHERE status IN (${STATUS_SQL.ENQUEUED}, ${STATUS_SQL.WAITING}))::int AS waiting,
              count(*) FILTER (WHERE status = ${STATUS_SQL.PENDING})::int AS running,
              count(*) FILTER (WHERE status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED})::int AS dead_lettered
       FROM ${this.active}
       WHERE status IN (${STATUS_SQL.ENQUEUED}, ${STATUS_SQL.WAITING}, ${STATUS_SQL.PENDING},
                        ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED})
       GROUP BY queue_name, workflow_name, workflow_version`,
      [],
      { idempotent: true },
    );
    return rows.map((row) => ({
      queueName: row.queue_name,
      workflowName: row.workflow_name,
      version: row.workflow_version,
      waiting: row.waiting,
      running: row.running,
      deadLettered: row.dead_lettered,
    }));
  }
}
