import type { Query, QueueDatabase } from '../database/connection/queue-database';
import type { ScheduleCatchUp } from '../interfaces/schedule-options.interface';
import type { ScheduleDefinition } from './schedule-definition';
import { DELAYED_SQL } from '../database/tables/workflow-status.sql';
import { workflowTables } from '../database/tables/workflow-tables';

/** One row of `schedules`. */
export interface ScheduleRow {
  name: string;
  source: 'decorator' | 'runtime';
  cron: string;
  timezone: string | null;
  workflow_name: string;
  queue_name: string;
  /** The stored arguments as JSON text. */
  args: string;
  catch_up: ScheduleCatchUp;
  catch_up_limit: number;
  overlap: boolean;
  paused: boolean;
  /** Every tick up to this instant has been enqueued or deliberately skipped. */
  ticked_through: Date;
  last_run_at: Date | null;
  last_workflow_id: string | null;
  /** The database's clock when the row was read. */
  db_now: Date;
}

const COLUMNS = `name, source, cron, timezone, workflow_name, queue_name, args::text AS args, catch_up, catch_up_limit,
  overlap, paused, ticked_through, last_run_at, last_workflow_id, now() AS db_now`;

/**
 * The SQL of schedules. Statements that belong to a tick's transaction take that transaction's `query`; the others
 * run on the module's pool.
 */
export class ScheduleStore {
  readonly table: string;
  private readonly workflows: string;

  constructor(private readonly database: QueueDatabase) {
    this.table = `${database.schemaSql}.schedules`;
    this.workflows = workflowTables(database.schemaSql).active;
  }

  /**
   * Stores a schedule's definition, keeping its pause flag and catch-up cursor if it exists. A new schedule's cursor
   * starts now: it has missed nothing. Returns false when a schedule of the other source has the name (a
   * decorator schedule takes the name over from a run-time one; a run-time schedule never replaces a decorator's).
   */
  async upsert(definition: ScheduleDefinition): Promise<boolean> {
    const rows = await this.database.query(
      `INSERT INTO ${this.table} AS s
         (name, source, cron, timezone, workflow_name, queue_name, args, catch_up, catch_up_limit, overlap)
       VALUES ($1, $2, $3, $4, $5, $6, $7::json, $8, $9, $10)
       ON CONFLICT (name) DO UPDATE SET
         source = EXCLUDED.source, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
         workflow_name = EXCLUDED.workflow_name, queue_name = EXCLUDED.queue_name, args = EXCLUDED.args,
         catch_up = EXCLUDED.catch_up, catch_up_limit = EXCLUDED.catch_up_limit, overlap = EXCLUDED.overlap,
         updated_at = EXCLUDED.updated_at
       WHERE s.source = EXCLUDED.source OR EXCLUDED.source = 'decorator'
       RETURNING name`,
      [
        definition.name,
        definition.source,
        definition.cron,
        definition.timezone,
        definition.workflowName,
        definition.queueName,
        definition.argsJson,
        definition.catchUp,
        definition.catchUpLimit,
        definition.overlap,
      ],
      { idempotent: true },
    );
    return rows.length === 1;
  }

  async list(): Promise<ScheduleRow[]> {
    const sql = `SELECT ${COLUMNS} FROM ${this.table} ORDER BY name`;
    return this.database.query<ScheduleRow>(sql, [], { idempotent: true });
  }

  async find(name: string): Promise<ScheduleRow | undefined> {
    const sql = `SELECT ${COLUMNS} FROM ${this.table} WHERE name = $1`;
    return (await this.database.query<ScheduleRow>(sql, [name], { idempotent: true }))[0];
  }

  /** Locks a schedule's row for the rest of the caller's transaction. */
  async lock(query: Query, name: string): Promise<ScheduleRow | undefined> {
    return (await query<ScheduleRow>(`SELECT ${COLUMNS} FROM ${this.table} WHERE name = $1 FOR UPDATE`, [name]))[0];
  }

  /** Moves the catch-up cursor forward (never back) and records the last run enqueued, if any. */
  async advance(
    query: Query,
    name: string,
    tickedThrough: Date,
    lastRun?: { at: Date; workflowId: string },
  ): Promise<void> {
    await query(
      `UPDATE ${this.table}
       SET ticked_through = greatest(ticked_through, $2),
           last_run_at = coalesce($3, last_run_at), last_workflow_id = coalesce($4, last_workflow_id),
           updated_at = now()
       WHERE name = $1`,
      [name, tickedThrough, lastRun?.at ?? null, lastRun?.workflowId ?? null],
    );
  }

  /**
   * Pauses or resumes. Resuming moves the cursor to now, so the ticks that passed while paused are never made up.
   * False when there is no such schedule. NOTE: a statement per case, not a CASE: Citus refuses `now()` in a CASE of an
   * UPDATE (`schedules` is a Citus local table there).
   */
  async setPaused(name: string, paused: boolean): Promise<boolean> {
    const rows = await this.database.query(
      `UPDATE ${this.table}
       SET paused = $2, updated_at = now()${paused ? '' : ', ticked_through = greatest(ticked_through, now())'}
       WHERE name = $1
       RETURNING name`,
      [name, paused],
      { idempotent: true },
    );
    return rows.length === 1;
  }

  async remove(name: string): Promise<boolean> {
    return (await this.database.query(`DELETE FROM ${this.table} WHERE name = $1 RETURNING name`, [name])).length === 1;
  }

  /**
   * The runs of a schedule enqueued ahead of their time (by a process whose clock runs ahead of the database's)
   * that have not started: pausing or removing the schedule cancels them.
   */
  async futureTicks(name: string): Promise<string[]> {
    const rows = await this.database.query<{ workflow_id: string }>(
      `SELECT workflow_id FROM ${this.workflows}
       WHERE starts_with(workflow_id, $1) AND ${DELAYED_SQL} AND attempts = 0`,
      [tickWorkflowIdPrefix(name)],
      { idempotent: true },
    );
    return rows.map((row) => row.workflow_id);
  }
}

/** The workflow ID of a tick's run: the same in every process, so the database keeps one run per tick. */
export function tickWorkflowId(name: string, tick: Date): string {
  return `${tickWorkflowIdPrefix(name)}${tick.toISOString()}`;
}

function tickWorkflowIdPrefix(name: string): string {
  return `sched:${name}:`;
}
