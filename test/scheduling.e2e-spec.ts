/**
 * Scheduled workflows across real OS processes (test/fixtures/child-scheduler.ts) on one schema: three processes
 * tick every-second schedules for about ten seconds (one run per tick, the start spread, overlap: false), then all
 * of them stop for five seconds and two start again (catch-up 'none', 'latest' and 'all').
 */
import { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import {
  ScheduleRun,
  consecutiveSeconds,
  databaseNow,
  percentile,
  spawnScheduler,
  stopSchedulers,
  tickRuns,
} from './support/schedule-runs';
import { waitFor } from './support/wait-for';

const PROVIDERS = 'EverySecondTasks,CatchUpTasks';
const RUN_MS = 10_000;
const DOWNTIME_MS = 5_000;

describe('Scheduled workflows across three processes', () => {
  const schema = uniqueSchema('sched');
  let pool: Pool;
  /** Database times: all three ready, just before they were stopped, and the restart. */
  let startedAt: number;
  let stoppedAt: number;
  let restartedAt: number;
  const before = new Map<string, ScheduleRun[]>();
  const after = new Map<string, ScheduleRun[]>();
  const schedules = ['every-second', 'catch-up-none', 'catch-up-latest', 'catch-up-all', 'no-overlap'];

  beforeAll(async () => {
    pool = testPool();
    const first = await startAll(['a1', 'a2', 'a3']);
    startedAt = await databaseNow(pool);
    await waitFor(async () => (await databaseNow(pool)) >= startedAt + RUN_MS, {
      timeoutMs: RUN_MS + 5000,
      intervalMs: 100,
    });
    stoppedAt = await databaseNow(pool);
    await stopSchedulers(first);
    for (const name of schedules) before.set(name, await tickRuns(pool, schema, name));

    // NOTE: the downtime itself is what is tested: no process runs for DOWNTIME_MS.
    await new Promise((resolve) => setTimeout(resolve, DOWNTIME_MS));
    restartedAt = await databaseNow(pool);
    const second = await startAll(['b1', 'b2']);
    await waitFor(
      async () =>
        (await tickRuns(pool, schema, 'catch-up-none')).filter(
          (run) => run.createdAt > restartedAt && run.status === 'SUCCESS',
        ).length >= 3,
      { timeoutMs: 15_000, intervalMs: 100, what: 'three runs after the restart' },
    );
    await stopSchedulers(second);
    for (const name of schedules) {
      after.set(
        name,
        (await tickRuns(pool, schema, name)).filter((run) => run.createdAt > restartedAt),
      );
    }
  }, 60_000);

  async function startAll(names: string[]): Promise<FixtureProcess[]> {
    const children = names.map((name) => spawnScheduler(name, schema, PROVIDERS));
    await Promise.all(children.map((child) => child.message('ready')));
    return children;
  }

  afterAll(async () => {
    await killFixtures();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs exactly one workflow per tick, none missing while the processes ran, each given its tick as a Date', () => {
    const runs = before.get('every-second') as ScheduleRun[];
    const ticks = runs.map((run) => run.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(consecutiveSeconds(ticks)).toBe(true);
    const whileRunning = ticks.filter((tick) => tick > startedAt && tick <= stoppedAt);
    expect(whileRunning.length).toBeGreaterThanOrEqual(Math.floor(RUN_MS / 1000) - 1);
    expect(whileRunning[0]).toBe(Math.ceil((startedAt + 1) / 1000) * 1000);
    // The tick just before the stop may still have been on its way when the processes got SIGTERM.
    expect(whileRunning[whileRunning.length - 1]).toBeGreaterThanOrEqual(Math.floor(stoppedAt / 1000) * 1000 - 1000);
    for (const run of runs.filter((candidate) => candidate.tick <= stoppedAt - 1000)) {
      expect(run.workflowId).toBe(`sched:every-second:${new Date(run.tick).toISOString()}`);
      expect(run.status).toBe('SUCCESS');
      expect(run.output).toBe(new Date(run.tick).toISOString());
    }
  });

  it('never starts a run before its tick by the database clock, and reports the start spread', () => {
    const all = [...before.values(), ...after.values()].flat().filter((run) => run.startedAt !== null);
    expect(all.length).toBeGreaterThan(30);
    expect(all.filter((run) => !run.startedOnTime)).toEqual([]);
    const measured = ['every-second', 'catch-up-none', 'catch-up-latest', 'catch-up-all']
      .flatMap((name) => before.get(name) as ScheduleRun[])
      .filter((run) => run.tick > startedAt && run.startDelayMs !== null);
    const delays = measured.map((run) => run.startDelayMs as number);
    const enqueued = measured.map((run) => run.createdAt - run.tick);
    const describe = (values: number[]) =>
      `p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms`;
    console.log(
      `[scheduling] start spread (started_at - tick) with three processes over ${delays.length} runs: ` +
        `${describe(delays)}, max ${Math.max(...delays).toFixed(1)} ms (of which enqueue: ${describe(enqueued)})`,
    );
    expect(delays.length).toBeGreaterThanOrEqual(30);
  });

  it('with overlap: false, keeps one run at a time and skips the ticks that come meanwhile', () => {
    const runs = (before.get('no-overlap') as ScheduleRun[]).filter((run) => run.completedAt !== null);
    expect(runs.length).toBeGreaterThanOrEqual(2);
    const byStart = [...runs].sort((a, b) => (a.startedAt as number) - (b.startedAt as number));
    byStart.slice(1).forEach((run, index) => {
      expect(run.startedAt as number).toBeGreaterThanOrEqual(byStart[index].completedAt as number);
    });
    expect(runs.length).toBeLessThanOrEqual(Math.ceil(RUN_MS / 2500) + 1);
  });

  it("'none' skips the ticks missed while no process ran, and goes on with the next tick", () => {
    const old = lastTick('catch-up-none');
    const resumed = (after.get('catch-up-none') as ScheduleRun[]).map((run) => run.tick);
    expect(consecutiveSeconds(resumed)).toBe(true);
    expect(resumed[0] - old).toBeGreaterThanOrEqual(DOWNTIME_MS);
    expect(resumed[0]).toBeGreaterThan(restartedAt);
  });

  it("'latest' runs the most recent missed tick once, then goes on", () => {
    const firstRegular = firstTickAfterRestart('catch-up-none');
    const resumed = (after.get('catch-up-latest') as ScheduleRun[]).map((run) => run.tick);
    expect(consecutiveSeconds(resumed)).toBe(true);
    expect(resumed[0]).toBe(firstRegular - 1000);
    expect(resumed[0] - lastTick('catch-up-latest')).toBeGreaterThanOrEqual(DOWNTIME_MS - 1000);
  });

  it("'all' runs every missed tick once, so the ticks have no gap", () => {
    const runs = [...(before.get('catch-up-all') as ScheduleRun[]), ...(after.get('catch-up-all') as ScheduleRun[])];
    const ticks = runs.map((run) => run.tick).sort((a, b) => a - b);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(consecutiveSeconds(ticks)).toBe(true);
    const firstRegular = firstTickAfterRestart('catch-up-none');
    const missed = (after.get('catch-up-all') as ScheduleRun[]).filter((run) => run.tick < firstRegular);
    expect(missed.length).toBeGreaterThanOrEqual(DOWNTIME_MS / 1000 - 1);
    expect(missed.every((run) => run.createdAt > run.tick)).toBe(true);
    expect(missed[0].createdAt - missed[0].tick).toBeGreaterThan(DOWNTIME_MS - 1000);
  });

  function lastTick(schedule: string): number {
    const runs = before.get(schedule) as ScheduleRun[];
    return runs[runs.length - 1].tick;
  }

  function firstTickAfterRestart(schedule: string): number {
    return (after.get(schedule) as ScheduleRun[])[0].tick;
  }
});
