/**
 * Scheduled workflows: tick computation across DST changes, validation, two processes whose schedule clocks are
 * 3 s apart, and ScheduleService (pause, resume, trigger, create, remove, list) across two OS processes
 * (test/fixtures/child-scheduler.ts).
 */
import { Injectable } from '@nestjs/common';
import {
  DedupQueueConfigurationError,
  InvalidArgumentError,
  Scheduled,
  ScheduleNotFoundError,
  ScheduleService,
  UnknownWorkflowError,
  Workflow,
} from 'nest-dedup-queue';
import { TickCalculator } from 'nest-dedup-queue/testing';
import { Pool } from 'pg';
import { killFixtures } from './fixtures/child-harness';
import { RecordingTasks } from './fixtures/recording-tasks';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { startQueueApp } from './support/queue-app';
import {
  callSchedules,
  consecutiveSeconds,
  databaseNow,
  spawnScheduler,
  stopSchedulers,
  tickRuns,
} from './support/schedule-runs';
import { waitFor } from './support/wait-for';

const iso = (dates: Date[]) => dates.map((date) => date.toISOString());

describe("Schedule ticks across DST changes (the cron package's rule)", () => {
  const berlin = new TickCalculator('30 2 * * *', 'Europe/Berlin');

  it('fires a daily 02:30 that does not exist (spring forward) at 03:00, the first instant after the gap', () => {
    const ticks = berlin.ticksBetween(new Date('2026-03-27T12:00:00Z'), new Date('2026-03-31T00:00:00Z'));
    expect(iso(ticks)).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST: 02:30 does not exist that night
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
  });

  it('fires a daily 02:30 that happens twice (fall back) once, at its first occurrence', () => {
    const ticks = berlin.ticksBetween(new Date('2026-10-23T12:00:00Z'), new Date('2026-10-27T00:00:00Z'));
    expect(iso(ticks)).toEqual([
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // the first 02:30 (CEST); the second one (01:30Z, CET) does not fire
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
    expect(iso([berlin.nextAfter(new Date('2026-10-25T00:45:00Z')) as Date])).toEqual(['2026-10-26T01:30:00.000Z']);
  });

  it('fires an hourly schedule in both repeated hours at fall back, skips the missing hour at spring forward', () => {
    const hourly = new TickCalculator('0 * * * *', 'Europe/Berlin');
    expect(iso(hourly.ticksBetween(new Date('2026-10-24T23:30:00Z'), new Date('2026-10-25T02:00:00Z')))).toEqual([
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T01:00:00.000Z', // 02:00 CET
      '2026-10-25T02:00:00.000Z', // 03:00 CET
    ]);
    expect(iso(hourly.ticksBetween(new Date('2026-03-28T23:30:00Z'), new Date('2026-03-29T02:00:00Z')))).toEqual([
      '2026-03-29T00:00:00.000Z', // 01:00 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST (02:00 does not exist)
      '2026-03-29T02:00:00.000Z', // 04:00 CEST
    ]);
  });

  it('finds the most recent ticks without walking every tick since a cursor far behind', () => {
    const everySecond = new TickCalculator('* * * * * *', null);
    const upTo = new Date('2026-06-01T12:00:00.500Z');
    expect(iso(everySecond.latestTicks(new Date('2025-06-01T00:00:00Z'), upTo, 2))).toEqual([
      '2026-06-01T11:59:59.000Z',
      '2026-06-01T12:00:00.000Z',
    ]);
  });
});

@Injectable()
class TwoQueueTasks {
  @Scheduled('* * * * *')
  async unqueued(): Promise<void> {}
}

@Injectable()
class BadCronTasks {
  @Scheduled('61 * * * *', { queue: 'tasks' })
  async badCron(): Promise<void> {}
}

@Injectable()
class StackedTasks {
  @Scheduled('0 0 1 1 *', { name: 'yearly' })
  @Workflow({ name: 'stacked-yearly', maxAttempts: 2 })
  async yearly(tick: Date): Promise<string> {
    return tick instanceof Date ? tick.toISOString() : `not a Date: ${typeof tick}`;
  }

  @Workflow({ maxAttempts: 3 })
  @Scheduled('0 0 1 1 *')
  async other(tick: Date): Promise<string> {
    return tick instanceof Date ? tick.toISOString() : `not a Date: ${typeof tick}`;
  }
}

let pool: Pool;

beforeAll(() => (pool = testPool()));
afterAll(async () => {
  await killFixtures();
  await pool.end();
});

describe('Schedule definitions and validation', () => {
  const schema = uniqueSchema('schedval');
  afterAll(() => dropSchema(pool, schema));

  it('refuses at boot a @Scheduled method without a queue when several are declared, and a bad cron', async () => {
    await expect(
      startQueueApp({ schema, queues: [{ name: 'a' }, { name: 'b' }], worker: false }, [TwoQueueTasks]),
    ).rejects.toThrow(
      new DedupQueueConfigurationError(
        'TwoQueueTasks.unqueued: @Scheduled() options.queue must be given when several queues are declared ("a", "b")',
      ),
    );
    await expect(startQueueApp({ schema, worker: false }, [BadCronTasks])).rejects.toThrow(
      /BadCronTasks.badCron: @Scheduled\(\) cron "61 \* \* \* \*" is not a valid cron expression/,
    );
  });

  it('combines @Scheduled with @Workflow options in either order, and hands the method a Date', async () => {
    const app = await startQueueApp({ schema }, [StackedTasks]);
    try {
      const schedules = app.get(ScheduleService);
      const listed = (await schedules.list()).map(({ name, workflowName, source }) => ({ name, workflowName, source }));
      expect(listed).toEqual([
        { name: 'StackedTasks.other', workflowName: 'StackedTasks.other', source: 'decorator' },
        { name: 'yearly', workflowName: 'stacked-yearly', source: 'decorator' },
      ]);
      for (const [name, maxAttempts] of [
        ['yearly', 2],
        ['StackedTasks.other', 3],
      ] as const) {
        const handle = await schedules.trigger<string>(name);
        expect(new Date(await handle.getResult()).toISOString()).toBe(await handle.getResult());
        const { rows } = await pool.query(`SELECT max_attempts FROM "${schema}".workflows WHERE workflow_id = $1`, [
          handle.workflowId,
        ]);
        expect(rows[0].max_attempts).toBe(maxAttempts);
        expect((await schedules.get(name)).lastWorkflowId).toBe(handle.workflowId);
      }
      await schedules.remove('yearly');
      await schedules.remove('StackedTasks.other');
    } finally {
      await app.close();
    }
  });

  it('refuses bad run-time schedules with typed errors before anything is written', async () => {
    const app = await startQueueApp({ schema, worker: false }, [RecordingTasks]);
    try {
      const schedules = app.get(ScheduleService);
      const valid = { name: 'ok', cron: '* * * * *', workflow: 'RecordingTasks.nothing' };
      await expect(schedules.create({ ...valid, cron: 'every day' })).rejects.toThrow(InvalidArgumentError);
      await expect(schedules.create({ ...valid, cron: '* * *' })).rejects.toThrow(/cron "\* \* \*" has 3 fields/);
      await expect(schedules.create({ ...valid, timezone: 'Mars/Olympus' })).rejects.toThrow(
        /timezone "Mars\/Olympus"/,
      );
      await expect(schedules.create({ ...valid, name: 'a:b' })).rejects.toThrow(InvalidArgumentError);
      await expect(schedules.create({ ...valid, catchUp: 'some' as never })).rejects.toThrow(InvalidArgumentError);
      await expect(schedules.create({ ...valid, queue: 'nope' })).rejects.toThrow(InvalidArgumentError);
      await expect(schedules.create({ ...valid, workflow: 'Nope.nothing' })).rejects.toThrow(UnknownWorkflowError);
      await expect(schedules.create({ ...valid, args: [1n] })).rejects.toThrow(InvalidArgumentError);
      await expect(schedules.pause('missing')).rejects.toThrow(ScheduleNotFoundError);
      await expect(schedules.trigger('missing')).rejects.toThrow(ScheduleNotFoundError);
      expect(await schedules.list()).toEqual([]);
      const created = await schedules.create(valid);
      expect(created).toMatchObject({ name: 'ok', source: 'runtime', paused: false, queueName: 'tasks' });
      expect(created.nextRunAt?.getUTCSeconds()).toBe(0);
      await schedules.remove('ok');
      expect(await schedules.list()).toEqual([]);
    } finally {
      await app.close();
    }
  });
});

describe('Two processes whose schedule clocks are 3 s apart', () => {
  const schema = uniqueSchema('schedskew');
  afterAll(async () => {
    await killFixtures();
    await dropSchema(pool, schema);
  });

  it('make one run per tick, none started before its tick by the database clock; pause cancels early', async () => {
    const children = [
      spawnScheduler('on-time', schema, 'EverySecondTasks'),
      spawnScheduler('ahead', schema, 'EverySecondTasks', 3000),
    ];
    await Promise.all(children.map((child) => child.message('ready')));
    const startedAt = await databaseNow(pool);
    await waitFor(async () => (await databaseNow(pool)) >= startedAt + 6000, { timeoutMs: 12_000, intervalMs: 100 });
    const stoppedAt = await databaseNow(pool);
    await callSchedules(children[0], 'pause', 'every-second');
    const pausedAt = await databaseNow(pool);
    await stopSchedulers(children);
    const runs = await tickRuns(pool, schema, 'every-second');
    // Pausing cancelled the runs that the process ahead had enqueued for ticks still to come.
    const afterPause = runs.filter((run) => run.tick > pausedAt);
    expect(afterPause.length).toBeGreaterThanOrEqual(1);
    expect(afterPause.map((run) => run.status)).toEqual(afterPause.map(() => 'CANCELLED'));
    const ticks = runs.map((run) => run.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(consecutiveSeconds(ticks)).toBe(true);
    expect(ticks.filter((tick) => tick > startedAt && tick <= stoppedAt).length).toBeGreaterThanOrEqual(5);
    const started = runs.filter((run) => run.startedAt !== null);
    expect(started.length).toBeGreaterThanOrEqual(5);
    expect(started.filter((run) => !run.startedOnTime)).toEqual([]);
    // The process whose clock runs ahead enqueued most ticks early; the claim held them until their time.
    expect(runs.filter((run) => run.createdAt < run.tick - 2000).length).toBeGreaterThanOrEqual(3);
  }, 30_000);
});

describe('ScheduleService across two processes', () => {
  const schema = uniqueSchema('schedrt');
  afterAll(async () => {
    await killFixtures();
    await dropSchema(pool, schema);
  });

  const succeeded = async (schedule: string, after = 0) =>
    (await tickRuns(pool, schema, schedule)).filter((run) => run.status === 'SUCCESS' && run.tick > after);

  it('pauses, triggers once while paused, resumes without make-up, creates, lists, removes', async () => {
    const first = spawnScheduler('r1', schema, 'RuntimeTasks');
    const second = spawnScheduler('r2', schema, 'RuntimeTasks');
    await Promise.all([first.message('ready'), second.message('ready')]);
    await waitFor(async () => (await succeeded('pausable')).length >= 2, { what: 'two ticks of "pausable"' });

    await callSchedules(first, 'pause', 'pausable');
    const pausedAt = await databaseNow(pool);
    const listed = await callSchedules(second, 'list');
    expect(listed).toEqual([
      expect.objectContaining({ name: 'pausable', source: 'decorator', paused: true, nextRunAt: null }),
    ]);

    const { workflowId } = await callSchedules<{ workflowId: string }>(second, 'trigger', 'pausable');
    expect(workflowId).toMatch(/^sched:pausable:trigger:/);
    const triggered = await waitFor(async () => {
      const { rows } = await pool.query(`SELECT status, output FROM "${schema}".workflows WHERE workflow_id = $1`, [
        workflowId,
      ]);
      return rows[0]?.status === 'SUCCESS' && rows[0];
    });
    expect(typeof triggered.output).toBe('string');

    await waitFor(async () => (await databaseNow(pool)) >= pausedAt + 2000, { intervalMs: 100 });
    const resumeCalledAt = await databaseNow(pool);
    await callSchedules(first, 'resume', 'pausable');
    await waitFor(async () => (await succeeded('pausable', resumeCalledAt)).length >= 2, {
      what: 'ticks after resume',
    });
    const ticks = (await tickRuns(pool, schema, 'pausable')).map((run) => run.tick);
    expect(ticks.filter((tick) => tick > pausedAt && tick <= resumeCalledAt)).toEqual([]);
    expect(consecutiveSeconds(ticks.filter((tick) => tick > resumeCalledAt))).toBe(true);
    const { rows: triggers } = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE workflow_id LIKE 'sched:pausable:trigger:%'`,
    );
    expect(triggers[0].n).toBe(1);

    await expect(callSchedules(first, 'trigger', 'missing')).rejects.toThrow(/ScheduleNotFoundError/);
    await expect(
      callSchedules(first, 'create', { name: 'pausable', cron: '* * * * * *', workflow: 'RuntimeTasks.record' }),
    ).rejects.toThrow(/InvalidArgumentError: name "pausable" is the name of a @Scheduled\(\) method's schedule/);

    const created = await callSchedules(first, 'create', {
      name: 'report-acme',
      cron: '* * * * * *',
      workflow: 'RuntimeTasks.record',
      args: ['acme', 3],
    });
    expect(created).toMatchObject({ name: 'report-acme', source: 'runtime', paused: false, lastRunAt: null });
    const seenByOther = await callSchedules<Array<{ name: string }>>(second, 'list');
    expect(seenByOther.map((schedule: { name: string }) => schedule.name)).toEqual(['pausable', 'report-acme']);
    const reports = await waitFor(
      async () => {
        const found = await succeeded('report-acme');
        return found.length >= 2 && found;
      },
      { what: 'two runs of the run-time schedule' },
    );
    expect(reports.map((run) => run.output)).toEqual(reports.map(() => ['acme', 3]));
    const [, report] = await callSchedules<Array<Record<'lastRunAt' | 'lastWorkflowId' | 'nextRunAt', string>>>(
      second,
      'list',
    );
    expect(new Date(report.lastRunAt).getTime()).toBeGreaterThanOrEqual(reports[reports.length - 1].tick);
    expect(report.lastWorkflowId).toMatch(/^sched:report-acme:/);
    expect(new Date(report.nextRunAt).getTime()).toBeGreaterThan(new Date(report.lastRunAt).getTime());

    await callSchedules(second, 'remove', 'report-acme');
    const removedAt = await databaseNow(pool);
    const names = (await callSchedules<Array<{ name: string }>>(first, 'list')).map((schedule) => schedule.name);
    expect(names).toEqual(['pausable']);
    await waitFor(async () => (await succeeded('pausable', removedAt + 1000)).length >= 1, {
      what: 'a tick after the removal',
    });
    expect((await tickRuns(pool, schema, 'report-acme')).filter((run) => run.tick > removedAt)).toEqual([]);
    await stopSchedulers([first, second]);
  }, 45_000);
});
