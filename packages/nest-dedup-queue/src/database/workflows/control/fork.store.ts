import type { WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import type { NewWorkflow } from '../new-workflow';
import type { Query, QueueDatabase } from '../../connection/queue-database';
import { SET_EVENT_STEP_PREFIX } from '../../events/workflow-event.store';
import { DETERMINISM_ERROR, STATUS_SQL } from '../../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';

/** A workflow to fork, as `ForkStore` reads it (from the active table or the history), with what its fork copies. */
export interface ForkSource extends Pick<
  NewWorkflow,
  | 'queueName'
  | 'workflowName'
  | 'version'
  | 'deduplicationId'
  | 'inputsJson'
  | 'timeoutMs'
  | 'maxAttempts'
  | 'maxRecoveryAttempts'
  | 'partitionKey'
  | 'priority'
  | 'deduplicationWindowMs'
  | 'releaseKeyOnError'
> {
  workflowId: string;
  seq: string;
  /** As stored: `ENQUEUED` covers `DELAYED`. */
  status: WorkflowStatus;
  /** A dead letter parked by a code change, still holding its key: the fork takes the key from it. */
  holdsKey: boolean;
  /**
   * Where `fromStep: 'last-failure'` starts: the position a `WorkflowDeterminismError` names; else the last recorded
   * position if it recorded an error, or the one after it (every position the source completed is kept).
   */
  lastFailure: number;
}

/** A fork to make: its ID, its source and the position it starts at (positions before it are copied). */
export interface ForkCopy {
  forkId: string;
  sourceId: string;
  fromStep: number;
}

interface SourceRow {
  workflow_id: string;
  seq: string;
  queue_name: string;
  workflow_name: string;
  workflow_version: number;
  status: WorkflowStatus;
  deduplication_id: string | null;
  holds_key: boolean;
  inputs: string;
  timeout_ms: number | null;
  max_attempts: number;
  max_recovery_attempts: number;
  partition_key: string | null;
  priority: number;
  dedup_window_ms: number | null;
  release_key_on_error: boolean;
  last_failure: number;
}

/** $1 queue, $2 the forks' IDs, $3 their sources, $4 their start positions, as rows `f`. */
const FORKS_SQL = 'unnest($2::text[], $3::text[], $4::int[]) AS f(fork_id, source_id, from_step)';

/**
 * The SQL of `fork` and `forkMany`: reading sources (with where `'last-failure'` starts), and, in the transaction
 * that inserts the forks, letting go of a parked source's key and copying the recorded positions before each
 * fork's start: its steps (child handles, received messages, waits, patches, whatever a position records, as the
 * steps table holds every kind), the events as they were there, and the streams' values written by then. Every
 * statement names its queue.
 */
export class ForkStore {
  private readonly tables: WorkflowTables;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
  }

  /** The workflow with this ID (in any queue), as a fork source. */
  async byId(workflowId: string): Promise<ForkSource | undefined> {
    const rows = await this.database.query<SourceRow>(
      `SELECT ${this.sourceColumnsSql()} FROM ${this.tables.workflows} AS w WHERE w.workflow_id = $1 LIMIT 1`,
      [workflowId],
      { idempotent: true },
    );
    return rows[0] && toSource(rows[0]);
  }

  /**
   * One batch of a queue's workflows that match `where` (over `w`, with `$1` the queue, which it must name, and `$2`
   * the `seq` cursor, and the caller's `params` from `$3`), in `seq` order.
   */
  async matching(where: string, params: unknown[], limit: number): Promise<ForkSource[]> {
    const rows = await this.database.query<SourceRow>(
      `SELECT ${this.sourceColumnsSql('$1')} FROM ${this.tables.workflows} AS w
       WHERE ${where} ORDER BY w.seq LIMIT $${params.length + 1}`,
      [...params, limit],
      { idempotent: true },
    );
    return rows.map(toSource);
  }

  /**
   * In the forks' transaction: locks the sources of a queue (`FOR UPDATE`, in the history or the active table), so
   * that concurrent calls forking one source make its fork once: the second waits, then finds the fork (`existing`).
   */
  async lockSources(query: Query, queueName: string, sourceIds: string[]): Promise<void> {
    for (const table of [this.tables.history, this.tables.active]) {
      await query(
        `SELECT 1 FROM ${table} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])
         ORDER BY workflow_id FOR UPDATE`,
        [queueName, sourceIds],
      );
    }
  }

  /** In the forks' transaction, after `lockSources`: which of `forkIds` name a workflow of the queue already. */
  async existing(query: Query, queueName: string, forkIds: string[]): Promise<Set<string>> {
    const rows = await query<{ workflow_id: string }>(
      `SELECT workflow_id FROM ${this.tables.active} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])
       UNION ALL
       SELECT workflow_id FROM ${this.tables.history} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])`,
      [queueName, forkIds],
    );
    return new Set(rows.map((row) => row.workflow_id));
  }

  /** In the forks' transaction: parked sources of a queue let go of their keys, for their forks to take them. */
  async releaseKeys(query: Query, queueName: string, sourceIds: string[]): Promise<void> {
    if (sourceIds.length === 0) return;
    await query(
      `UPDATE ${this.tables.active} SET active_deduplication_id = NULL, updated_at = now()
       WHERE queue_name = $1 AND workflow_id = ANY($2::text[])
         AND status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}`,
      [queueName, sourceIds],
    );
  }

  /**
   * In the forks' transaction, once they are inserted: copies to each fork its source's recorded positions before
   * its start position, stamped with the fork's creation time (the day its steps' partition holds), and the events
   * as they were there (see `SET_EVENT_STEP_PREFIX`; a position recorded before 1.1 kept no value: the source's
   * current value stands in for it).
   */
  async copyRecords(query: Query, queueName: string, forks: ForkCopy[]): Promise<void> {
    if (forks.length === 0) return;
    const { steps, events, active } = this.tables;
    const params = [
      queueName,
      forks.map((fork) => fork.forkId),
      forks.map((fork) => fork.sourceId),
      forks.map((fork) => fork.fromStep),
    ];
    await query(
      `INSERT INTO ${steps} (workflow_id, step_index, step_name, output, error, started_at, completed_at, queue_name,
                             workflow_created_at)
       SELECT f.fork_id, s.step_index, s.step_name, s.output, s.error, s.started_at, s.completed_at, s.queue_name,
              w.created_at
       FROM ${FORKS_SQL}
       JOIN ${active} AS w ON w.queue_name = $1 AND w.workflow_id = f.fork_id
       JOIN ${steps} AS s ON s.queue_name = $1 AND s.workflow_id = f.source_id AND s.step_index < f.from_step`,
      params,
    );
    const key = `substr(s.step_name, ${SET_EVENT_STEP_PREFIX.length + 1})`;
    await query(
      `INSERT INTO ${events} (queue_name, workflow_id, key, value, workflow_created_at)
       SELECT DISTINCT ON (s.queue_name, f.fork_id, ${key}) s.queue_name, f.fork_id, ${key}, coalesce(s.output, e.value),
              w.created_at
       FROM ${FORKS_SQL}
       JOIN ${active} AS w ON w.queue_name = $1 AND w.workflow_id = f.fork_id
       JOIN ${steps} AS s ON s.queue_name = $1 AND s.workflow_id = f.source_id AND s.step_index < f.from_step
         AND s.error IS NULL AND left(s.step_name, ${SET_EVENT_STEP_PREFIX.length}) = '${SET_EVENT_STEP_PREFIX}'
       LEFT JOIN ${events} AS e ON e.queue_name = $1 AND e.workflow_id = f.source_id AND e.key = ${key}
       ORDER BY s.queue_name, f.fork_id, ${key}, s.step_index DESC`,
      params,
    );
    await this.copyStreams(query, params);
  }

  /**
   * Copies to each fork the values its source's streams held when the last position before the fork's start was
   * recorded (a body's write is recorded with its value, a step's values are written before its checkpoint); the
   * fork's run appends after them.
   */
  private async copyStreams(query: Query, params: unknown[]): Promise<void> {
    const { steps, streams, active } = this.tables;
    await query(
      `INSERT INTO ${streams} (queue_name, workflow_id, workflow_created_at, stream_key, stream_offset, value, closed,
                               total_bytes, written_at)
       SELECT v.queue_name, f.fork_id, w.created_at, v.stream_key, v.stream_offset, v.value, v.closed, v.total_bytes,
              v.written_at
       FROM ${FORKS_SQL}
       JOIN ${active} AS w ON w.queue_name = $1 AND w.workflow_id = f.fork_id
       JOIN LATERAL (
         SELECT max(s.completed_at) AS recorded_at FROM ${steps} AS s
         WHERE s.queue_name = $1 AND s.workflow_id = f.source_id AND s.step_index < f.from_step
       ) AS r ON true
       JOIN ${streams} AS v ON v.queue_name = $1 AND v.workflow_id = f.source_id AND v.written_at <= r.recorded_at`,
      params,
    );
  }

  /** The columns of a source `w`; `queue`: how its queue is named to its steps (on Citus, `$1`: one node). */
  private sourceColumnsSql(queue = 'w.queue_name'): string {
    return `w.workflow_id, w.seq::text AS seq, w.queue_name, w.workflow_name, w.workflow_version, w.status,
      w.deduplication_id, (w.status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
                           AND w.active_deduplication_id IS NOT NULL) AS holds_key,
      w.inputs::text AS inputs, w.timeout_ms, w.max_attempts, w.max_recovery_attempts, w.partition_key, w.priority,
      w.dedup_window_ms, w.release_key_on_error,
      CASE WHEN w.error ->> 'name' = '${DETERMINISM_ERROR}' AND w.error -> 'fields' ->> 'stepIndex' IS NOT NULL
           THEN (w.error -> 'fields' ->> 'stepIndex')::int
           ELSE coalesce((SELECT CASE WHEN s.error IS NULL THEN s.step_index + 1 ELSE s.step_index END
                          FROM ${this.tables.steps} AS s
                          WHERE s.queue_name = ${queue} AND s.workflow_id = w.workflow_id
                          ORDER BY s.step_index DESC LIMIT 1), 0)
      END AS last_failure`;
  }
}

function toSource(row: SourceRow): ForkSource {
  return {
    workflowId: row.workflow_id,
    seq: row.seq,
    queueName: row.queue_name,
    workflowName: row.workflow_name,
    version: row.workflow_version,
    status: row.status,
    deduplicationId: row.deduplication_id,
    holdsKey: row.holds_key,
    inputsJson: row.inputs,
    timeoutMs: row.timeout_ms,
    maxAttempts: row.max_attempts,
    maxRecoveryAttempts: row.max_recovery_attempts,
    partitionKey: row.partition_key,
    priority: row.priority,
    deduplicationWindowMs: row.dedup_window_ms,
    releaseKeyOnError: row.release_key_on_error,
    lastFailure: row.last_failure,
  };
}
