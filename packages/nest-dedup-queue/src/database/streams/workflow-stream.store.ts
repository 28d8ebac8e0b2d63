import type { EntityManager } from 'typeorm';
import { onePerDatabase } from '../connection/one-per-database';
import type { Query, QueueDatabase } from '../connection/queue-database';
import { streamHintPayload, streamHintPayloadSql } from '../connection/notification-channels';
import { isUniqueViolationOn } from '../connection/sql-errors';
import { STEP_COLUMNS } from '../steps/step-columns';
import { NOTIFY_SQL, sendWakeUpsLeftToCaller, wakeUpCteSql } from '../connection/wake-ups.sql';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';

/**
 * The names a body's write and close are recorded under at their positions: the prefix and the stream's key
 * (`writeStream tokens`); the output is the offset.
 */
export const WRITE_STREAM_STEP_PREFIX = 'writeStream ';
export const CLOSE_STREAM_STEP_PREFIX = 'closeStream ';

/** The run that writes: only while its workflow is PENDING in this run (its claim count) may it append. */
export interface StreamWriter {
  queueName: string;
  workflowId: string;
  attempt: number;
  /** Whether this run's writes set `has_streams` already (the first write of a run sets it). */
  flagged: boolean;
}

/** One value to append (JSON text), or the close (null); from the body at its position, or from a step (null). */
export interface StreamItem {
  valueJson: string | null;
  /** The value's size in bytes (UTF-8), counted against the stream's cap. */
  bytes: number;
  /** The body position it is recorded at (exactly once), or null from a step (at least once). */
  stepIndex: number | null;
}

/** Values to append to one stream in one statement, in order (a close is appended alone). */
export interface StreamAppend {
  key: string;
  items: StreamItem[];
  /** The name of the checkpoints of the items appended from the body. */
  stepName: string;
  maxValues: number;
  maxBytes: number;
}

/**
 * What an append did: `appended` items from the first (at `firstOffset` on; those after them were refused by the
 * cap), or why it did nothing.
 */
export type StreamAppendResult =
  | { outcome: 'appended'; appended: number; firstOffset: number; values: number; bytes: number }
  | { outcome: 'not-owned' }
  | { outcome: 'closed' }
  /** A position of the batch was recorded before (a body re-executed after a lost answer): its output. */
  | { outcome: 'recorded'; outputJson: string }
  /** Another writer took an offset meanwhile (a run that lost its workflow, still running): try again. */
  | { outcome: 'raced' };

/** Where a workflow's streams are: its queue and creation time (as text, exact to the microsecond). */
export interface StreamLocation {
  queueName: string;
  createdAt: string;
}

/** A stored stream entry: a value at its offset, or the close marker. */
export interface StreamEntry {
  offset: number;
  valueJson: string | null;
  closed: boolean;
}

/** One read of a stream: the entries from an offset on, and whether its workflow was finished at that moment. */
export interface StreamPage {
  entries: StreamEntry[];
  finished: boolean;
  /** Whether the workflow's end will hint the readers (`has_streams`); true once finished. */
  endHinted: boolean;
}

/** A stream as the dashboard lists it. */
export interface StreamSummary {
  key: string;
  values: number;
  bytes: number;
  closed: boolean;
  lastWrittenAt: Date;
}

/**
 * The SQL of durable streams (`writeStream`, `closeStream`, `readStream`): an append-only log per workflow and key in
 * `workflow_streams`. An append names the queue, holds the workflow's row against its end (`FOR KEY SHARE`, or the
 * update of a run's first write) while it reads the stream's last row (offset, bytes, closed) and inserts the next,
 * so that no value lands after its workflow finished; it sends the readers' hint (the workflow's ID) on commit. A
 * read gets the entries from an offset and the workflow's state in one snapshot: a finished workflow's stream, read
 * whole, is closed.
 */
export class WorkflowStreamStore {
  private readonly tables: WorkflowTables;
  private readonly appendSql: { first: string; next: string };

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.appendSql = { first: this.buildAppendSql(true), next: this.buildAppendSql(false) };
  }

  /** The channel of the readers' hints. */
  get channel(): string {
    return this.tables.streamChannel;
  }

  /**
   * Appends values (or the close) to a stream of the writer's workflow, and records those from the body at their
   * positions, in one statement (in the transaction of `manager` when given: a transactional step). Values past the
   * cap are not appended (those before them are). A batch of which a position was recorded before appends nothing.
   */
  async append(writer: StreamWriter, append: StreamAppend, manager?: EntityManager): Promise<StreamAppendResult> {
    const sql = writer.flagged ? this.appendSql.next : this.appendSql.first;
    const { items } = append;
    const params = [
      writer.queueName,
      writer.workflowId,
      writer.attempt,
      append.key,
      items.map((item) => item.valueJson),
      items.map((item) => item.bytes),
      items.map((item) => item.stepIndex),
      items.length === 1 && items[0].valueJson === null,
      append.maxValues,
      append.maxBytes,
      append.stepName,
      ...(this.database.citus ? [] : [this.channel]),
    ];
    const run = async (query: Query) => {
      const [row] = await query<AppendRow>(sql, params);
      if (this.database.citus && row.appended > 0) {
        await query(NOTIFY_SQL, [this.channel, [streamHintPayload(writer.workflowId)]]);
      }
      return row;
    };
    try {
      let row: AppendRow;
      if (manager) {
        row = await run((text, values) => manager.query(text, values));
      } else if (this.database.citus) {
        row = await this.database.transaction(run);
      } else {
        [row] = await this.database.query<AppendRow>(sql, params, { prepared: true, idempotent: true });
      }
      return appendResult(row);
    } catch (error) {
      if (isUniqueViolationOn(error, STREAMS_KEY) || isUniqueViolationOn(error, STEPS_KEY)) return { outcome: 'raced' };
      throw error;
    }
  }

  /** The queue and creation time of a workflow, or undefined when no workflow has this ID. */
  async locate(workflowId: string): Promise<StreamLocation | undefined> {
    const rows = await this.database.query<{ queue_name: string; created_at: string }>(
      `SELECT queue_name, created_at::text AS created_at FROM ${this.tables.workflows} WHERE workflow_id = $1 LIMIT 1`,
      [workflowId],
      { idempotent: true },
    );
    return rows[0] && { queueName: rows[0].queue_name, createdAt: rows[0].created_at };
  }

  /** Up to `limit` entries of a stream from `offset` on, in order, and whether its workflow was finished then. */
  async read(
    location: StreamLocation,
    workflowId: string,
    key: string,
    offset: number,
    limit: number,
  ): Promise<StreamPage> {
    const rows = await this.database.query<{
      has_streams: boolean | null;
      stream_offset: number | null;
      value: string | null;
      closed: boolean | null;
    }>(
      `SELECT f.has_streams, s.stream_offset, s.value, s.closed
       FROM (SELECT (SELECT has_streams FROM ${this.tables.active}
                     WHERE queue_name = $1 AND workflow_id = $2
                       AND status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}) AS has_streams) AS f
       LEFT JOIN LATERAL (
         SELECT stream_offset, value::text AS value, closed FROM ${this.tables.streams}
         WHERE queue_name = $1 AND workflow_id = $2 AND workflow_created_at = $3::timestamptz AND stream_key = $4
           AND stream_offset >= $5
         ORDER BY stream_offset LIMIT $6
       ) AS s ON true
       ORDER BY s.stream_offset`,
      [location.queueName, workflowId, location.createdAt, key, offset, limit],
      { prepared: true, idempotent: true },
    );
    const hasStreams = rows[0]?.has_streams ?? null;
    return {
      finished: hasStreams === null,
      endHinted: hasStreams !== false,
      entries: rows
        .filter((row) => row.stream_offset !== null)
        .map((row) => ({ offset: row.stream_offset as number, valueJson: row.value, closed: row.closed === true })),
    };
  }

  /**
   * Makes the end of an unfinished workflow hint its streams' readers (`has_streams`), for a reader that waits on a
   * workflow that has not written yet. NOTE: the end's DELETE sees this update (it waits for its lock and takes the
   * row as updated), so a workflow that ends after it hints; one that ended before it is seen finished by the next
   * read. A claim (or a wake-up of sleepers) that met the row locked by it passed over it: the queue's workers are
   * woken again, and claim it (a waiting row is made due by the next round of its queue's waker, a heartbeat later).
   */
  async hintAtEnd(location: StreamLocation, workflowId: string): Promise<void> {
    const [row] = await this.database.query<{ woken: number }>(
      `WITH flagged AS (
         UPDATE ${this.tables.active} SET has_streams = true
         WHERE queue_name = $1 AND workflow_id = $2 AND status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}
           AND NOT has_streams
         RETURNING queue_name, status
       ),
       ${wakeUpCteSql(this.database.citus, 'woken', '$3', `flagged WHERE status <> ${STATUS_SQL.PENDING}`)}
       SELECT (SELECT count(*) FROM woken)::int AS woken`,
      [location.queueName, workflowId, this.database.wakeUpChannel],
      { idempotent: true },
    );
    await sendWakeUpsLeftToCaller(this.database, row.woken > 0 ? [location.queueName] : []);
  }

  /** Every stream of a workflow: its key, how many values and bytes it holds, whether it is closed. */
  async summaries(location: StreamLocation, workflowId: string): Promise<StreamSummary[]> {
    const rows = await this.database.query<{
      stream_key: string;
      stream_offset: number;
      total_bytes: string;
      closed: boolean;
      written_at: Date;
      finished: boolean;
    }>(
      `SELECT DISTINCT ON (stream_key) stream_key, stream_offset, total_bytes::text AS total_bytes, closed, written_at,
              NOT EXISTS (SELECT 1 FROM ${this.tables.active}
                          WHERE queue_name = $1 AND workflow_id = $2
                            AND status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}) AS finished
       FROM ${this.tables.streams}
       WHERE queue_name = $1 AND workflow_id = $2 AND workflow_created_at = $3::timestamptz
       ORDER BY stream_key, stream_offset DESC`,
      [location.queueName, workflowId, location.createdAt],
      { idempotent: true },
    );
    return rows.map((row) => ({
      key: row.stream_key,
      values: row.closed ? row.stream_offset : row.stream_offset + 1,
      bytes: Number(row.total_bytes),
      closed: row.closed || row.finished,
      lastWrittenAt: row.written_at,
    }));
  }

  /**
   * The append statement: `owned` is the writer's workflow row, held against its end: a run's first write updates
   * it (`has_streams`, which makes the end hint this stream's readers), the next ones lock it `FOR KEY SHARE`. The
   * batch (`$5` values, `$6` bytes, `$7` positions) takes the offsets after the stream's last row; the prefix that
   * fits the cap is inserted, its body writes checkpointed (output: the offset), and the readers hinted on commit.
   */
  private buildAppendSql(first: boolean): string {
    const { active, streams, steps } = this.tables;
    const run = `queue_name = $1 AND workflow_id = $2 AND status = ${STATUS_SQL.PENDING} AND attempts = $3`;
    const owned = first
      ? `UPDATE ${active} SET has_streams = true WHERE ${run} RETURNING created_at`
      : `SELECT created_at FROM ${active} WHERE ${run} FOR KEY SHARE`;
    const hint = this.database.citus
      ? ''
      : `, hinted AS (SELECT pg_notify($12, ${streamHintPayloadSql('$2::text')})::text WHERE EXISTS (SELECT 1 FROM appended))`;
    return `WITH owned AS (${owned}),
       head AS (
         SELECT stream_offset, total_bytes, closed FROM ${streams}
         WHERE queue_name = $1 AND workflow_id = $2 AND stream_key = $4
           AND workflow_created_at = (SELECT created_at FROM owned)
         ORDER BY stream_offset DESC LIMIT 1
       ),
       earlier AS (
         SELECT output::text AS output FROM ${steps}
         WHERE queue_name = $1 AND workflow_id = $2 AND step_index = ANY($7::int[])
           AND workflow_created_at = (SELECT created_at FROM owned)
       ),
       state AS (
         SELECT o.created_at, coalesce(h.stream_offset + 1, 0) AS next_offset, coalesce(h.total_bytes, 0) AS bytes,
                coalesce(h.closed, false) AS closed, (SELECT count(*) FROM earlier) AS earlier
         FROM owned AS o LEFT JOIN head AS h ON true
       ),
       accepted AS (
         SELECT * FROM (
           SELECT b.value, b.step_index, s.created_at, s.next_offset + b.ord::int - 1 AS stream_offset,
                  s.bytes + sum(b.bytes) OVER (ORDER BY b.ord) AS total_bytes
           FROM unnest($5::json[], $6::bigint[], $7::int[]) WITH ORDINALITY AS b(value, bytes, step_index, ord)
           CROSS JOIN state AS s
           WHERE s.earlier = 0 AND NOT s.closed
         ) AS planned
         WHERE $8::boolean OR (stream_offset < $9::int AND total_bytes <= $10::bigint)
       ),
       appended AS (
         INSERT INTO ${streams} (queue_name, workflow_id, workflow_created_at, stream_key, stream_offset, value, closed,
                                 total_bytes)
         SELECT $1, $2, created_at, $4, stream_offset, value, $8::boolean, total_bytes FROM accepted
         RETURNING stream_offset
       ),
       recorded AS (
         INSERT INTO ${steps} (${STEP_COLUMNS})
         SELECT $2, step_index, $11, to_json(stream_offset), NULL, now(), now(), $1, created_at FROM accepted
         WHERE step_index IS NOT NULL
       )${hint}
       SELECT s.created_at IS NOT NULL AS owned, s.next_offset, s.bytes::text AS bytes, s.closed, s.earlier::int,
              (SELECT min(output) FROM earlier) AS earlier_output, (SELECT count(*) FROM appended)::int AS appended
              ${this.database.citus ? '' : ', (SELECT count(*) FROM hinted) AS hinted'}
       FROM (SELECT 1) AS one LEFT JOIN state AS s ON true`;
  }
}

/** The unique keys an append may collide on, when another writer appended or recorded meanwhile. */
const STREAMS_KEY = 'workflow_streams_pkey';
const STEPS_KEY = 'steps_key';

interface AppendRow {
  owned: boolean;
  next_offset: number | null;
  bytes: string | null;
  closed: boolean | null;
  earlier: number | null;
  earlier_output: string | null;
  appended: number;
}

function appendResult(row: AppendRow): StreamAppendResult {
  if (!row.owned) return { outcome: 'not-owned' };
  if (row.earlier_output !== null) return { outcome: 'recorded', outputJson: row.earlier_output };
  if (row.closed) return { outcome: 'closed' };
  return {
    outcome: 'appended',
    appended: row.appended,
    firstOffset: row.next_offset ?? 0,
    values: row.next_offset ?? 0,
    bytes: Number(row.bytes ?? 0),
  };
}

/**
 * The stream store of a module's database: one per database, so that `writeStream` (called from a workflow's code,
 * which reaches the database through its execution) and the readers share its statements.
 */
export const workflowStreamStore = onePerDatabase((database) => new WorkflowStreamStore(database));
