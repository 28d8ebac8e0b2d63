import type { Pool } from 'pg';
import { FixtureProcess, spawnFixture } from '../fixtures/child-harness';

/**
 * One stored run of a schedule, with times in milliseconds by the database's clock. The tick is read from the
 * workflow ID (`sched:<name>:<tick ISO time>`), the library's record of it.
 */
export interface ScheduleRun {
  workflowId: string;
  status: string;
  tick: number;
  createdAt: number;
  startedAt: number | null;
  completedAt: number | null;
  /** started_at >= the tick, compared in Postgres (microseconds). */
  startedOnTime: boolean | null;
  /** started_at - the tick in milliseconds. */
  startDelayMs: number | null;
  output: unknown;
}

/** The tick runs of a schedule (trigger runs excluded), oldest tick first. */
export async function tickRuns(pool: Pool, schema: string, schedule: string): Promise<ScheduleRun[]> {
  const { rows } = await pool.query(
    `SELECT workflow_id, status, tick, created_at, started_at, completed_at, output::text AS output,
            started_at >= tick AS started_on_time,
            (extract(epoch FROM started_at - tick) * 1000)::float8 AS start_delay_ms
     FROM (SELECT *, substr(workflow_id, length($1) + 1)::timestamptz AS tick FROM "${schema}".workflows
           WHERE starts_with(workflow_id, $1) AND workflow_id NOT LIKE '%:trigger:%') AS runs
     ORDER BY tick`,
    [`sched:${schedule}:`],
  );
  return rows.map((row) => ({
    workflowId: row.workflow_id,
    status: row.status,
    tick: row.tick.getTime(),
    createdAt: row.created_at.getTime(),
    startedAt: row.started_at?.getTime() ?? null,
    completedAt: row.completed_at?.getTime() ?? null,
    startedOnTime: row.started_on_time,
    startDelayMs: row.start_delay_ms,
    output: row.output === null ? undefined : JSON.parse(row.output),
  }));
}

export async function databaseNow(pool: Pool): Promise<number> {
  return (await pool.query('SELECT now() AS now')).rows[0].now.getTime();
}

/** Whether ticks are distinct whole seconds, one second apart. */
export function consecutiveSeconds(ticks: number[]): boolean {
  return ticks.every((tick, index) => tick % 1000 === 0 && (index === 0 || tick - ticks[index - 1] === 1000));
}

/** Starts test/fixtures/child-scheduler.ts with the given providers (and a schedule clock offset). */
export function spawnScheduler(name: string, schema: string, providers: string, clockOffsetMs = 0): FixtureProcess {
  return spawnFixture('child-scheduler.ts', name, {
    SCHEMA: schema,
    EXECUTOR: name,
    PROVIDERS: providers,
    CLOCK_OFFSET_MS: String(clockOffsetMs),
  });
}

/** Stops scheduler processes with SIGTERM and waits until they have exited. */
export async function stopSchedulers(processes: FixtureProcess[]): Promise<void> {
  for (const child of processes) child.child.kill('SIGTERM');
  await Promise.all(processes.map((child) => child.waitForExit()));
}

let callId = 0;

/** Calls a ScheduleService method in a scheduler process; rejects with the error it threw there. */
export async function callSchedules<T = unknown>(
  child: FixtureProcess,
  method: string,
  ...args: unknown[]
): Promise<T> {
  const id = ++callId;
  child.send({ type: 'call', id, method, args });
  const result = await child.message<{ type: 'result'; id: number; value?: unknown; error?: string }>('result', { id });
  if (result.error) throw new Error(result.error);
  return result.value as T;
}

/** The p-th percentile (0..100) of some values, nearest rank. */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
