import { randomInt } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool } from 'pg';
import { DurableSteps, DurableTasks, durableTablesSql } from './fixtures/child-durable-tasks';
import type { FixtureProcess } from './fixtures/child-harness';
import type { QueueApp } from './support/queue-app';
import { useWorkerSuite } from './support/worker-suite';
import { waitFor } from './support/wait-for';

const WORKFLOWS = 200;
const KILLS = 3;

/**
 * Chaos: 200 workflows of two transactional steps each across three worker processes (child-durable-worker.ts,
 * leaseMs 1500, heartbeatIntervalMs 300, 4 slots each), one of which is SIGKILLed at random moments while it runs
 * workflows, three times, and started again after each kill.
 *
 * The victim comes back alternately with the same executorId (its orphans are recovered at once by the new process)
 * and with a new one (its orphans wait for the old lease to expire and are recovered by whichever live executor
 * sweeps first), so both recovery paths run under load, and the same-id restart races the peers' lease sweeps.
 */
describe('chaos: SIGKILL one of three workers at random moments', () => {
  const suite = useWorkerSuite({
    prefix: 'chaos',
    queues: [{ name: 'durable' }, { name: 'serial' }],
    providers: [DurableSteps, DurableTasks],
    tablesSql: durableTablesSql,
    worker: 'child-durable-worker.ts',
  });
  const { schema } = suite;
  let pool: Pool;
  let app: QueueApp;

  beforeAll(() => ({ pool, app } = suite));

  const startWorker = (executorId: string): Promise<FixtureProcess> =>
    suite.startWorker(executorId, { QUEUES: 'durable', WORKER_CONCURRENCY: '4', POOL_SIZE: '6' });

  const count = async (sql: string, params: unknown[] = []): Promise<number> =>
    (await pool.query(`SELECT count(*)::int AS n FROM ${sql}`, params)).rows[0].n;

  it(`ends all ${WORKFLOWS} workflows SUCCESS with every step's side effect exactly once`, async () => {
    const startedAt = performance.now();
    const [, , firstVictim] = await Promise.all(['chaos-a', 'chaos-b', 'chaos-victim-1'].map(startWorker));
    let victim = firstVictim;
    let victimId = 'chaos-victim-1';

    const tasks = app.get(DurableTasks);
    const workflowIds = Array.from({ length: WORKFLOWS }, (_, n) => `chaos-${n}`);
    await Promise.all(
      workflowIds.map((workflowId, n) =>
        app.queues.enqueue('durable', tasks.chaos, [n], { workflowId, deduplicationId: workflowId }),
      ),
    );

    const kills: Array<{ executorId: string; orphans: number; restartedAs: string }> = [];
    for (let kill = 1; kill <= KILLS; kill++) {
      // A random moment while the victim is running workflows; none once the others left it nothing to claim (a
      // restart slow under load can come after the backlog is drained).
      let running = false;
      await waitFor(
        async () => {
          running =
            (await count(`"${schema}".workflows WHERE status = 'PENDING' AND executor_id = $1`, [victimId])) > 0;
          return running || (await count(`"${schema}".workflows WHERE status = 'ENQUEUED'`)) === 0;
        },
        { timeoutMs: 60_000, what: `${victimId} to run workflows` },
      );
      if (!running) break;
      await sleep(randomInt(0, 400));
      victim.child.kill('SIGKILL');
      expect(await victim.ended).toEqual({ code: null, signal: 'SIGKILL' });
      // NOTE: a statement the victim sent just before the kill (an outcome) still commits on its backend: count the
      // orphans once two reads a quarter second apart agree.
      const pendingOf = (id: string) =>
        count(`"${schema}".workflows WHERE status = 'PENDING' AND executor_id = $1`, [id]);
      let orphans = await pendingOf(victimId);
      await waitFor(
        async () => {
          await sleep(250);
          const now = await pendingOf(victimId);
          const settled = now === orphans;
          orphans = now;
          return settled;
        },
        { timeoutMs: 10_000, what: `${victimId}'s last statements to settle` },
      );
      // Odd kills: same executorId (immediate recovery at boot); even kills: a new one (lease path for the old one).
      const restartedAs = kill % 2 === 1 ? victimId : `chaos-victim-${kill + 1}`;
      kills.push({ executorId: victimId, orphans, restartedAs });
      victim = await startWorker(restartedAs);
      victimId = restartedAs;
    }

    await waitFor(async () => (await count(`"${schema}".workflows WHERE status = 'SUCCESS'`)) === WORKFLOWS, {
      timeoutMs: 60_000,
      intervalMs: 100,
      what: `all ${WORKFLOWS} workflows to succeed`,
    });
    const elapsedMs = performance.now() - startedAt;

    const { rows: statuses } = await pool.query(
      `SELECT status, count(*)::int AS n FROM "${schema}".workflows GROUP BY status`,
    );
    expect(statuses).toEqual([{ status: 'SUCCESS', n: WORKFLOWS }]);
    // Every (workflow, step) side effect exactly once: no duplicates, none missing.
    const { rows: notOnce } = await pool.query(
      `SELECT w.workflow_id, s.step, count(e.id)::int AS n
       FROM "${schema}".workflows w CROSS JOIN (VALUES ('a'), ('b')) AS s(step)
       LEFT JOIN "${schema}".side_effects e ON e.workflow_id = w.workflow_id AND e.step = s.step
       GROUP BY 1, 2 HAVING count(e.id) <> 1`,
    );
    expect(notOnce).toEqual([]);
    expect(await count(`"${schema}".side_effects`)).toBe(2 * WORKFLOWS);
    // Each result is made of the step outputs as recorded: the ids of the side-effect rows that committed.
    const { rows: mismatched } = await pool.query(
      `SELECT w.workflow_id, w.output::text
       FROM "${schema}".workflows w
       JOIN "${schema}".side_effects a ON a.workflow_id = w.workflow_id AND a.step = 'a'
       JOIN "${schema}".side_effects b ON b.workflow_id = w.workflow_id AND b.step = 'b'
       WHERE (w.output->>'a')::int <> a.id OR (w.output->>'b')::int <> b.id
          OR (w.output->>'n')::int <> substring(w.workflow_id FROM 7)::int`,
    );
    expect(mismatched).toEqual([]);
    expect(await count(`"${schema}".workflows WHERE active_deduplication_id IS NOT NULL`)).toBe(0);

    const {
      rows: [recovery],
    } = await pool.query(
      `SELECT coalesce(sum(recovery_attempts), 0)::int AS recoveries, count(*) FILTER (WHERE recovery_attempts > 0)::int AS recovered
       FROM "${schema}".workflows`,
    );
    const orphaned = kills.reduce((sum, k) => sum + k.orphans, 0);
    console.log(
      `[chaos] ${WORKFLOWS} workflows, ${kills.length} SIGKILLs, all SUCCESS in ${Math.round(elapsedMs)} ms; ` +
        `${recovery.recovered} workflows recovered (sum of recovery_attempts ${recovery.recoveries}); ` +
        `orphans per kill: ${JSON.stringify(kills)}`,
    );
    // Every kill left work behind, and each orphan was recovered (once per kill that orphaned it).
    expect(kills.length).toBeGreaterThan(0);
    for (const k of kills) expect(k.orphans).toBeGreaterThan(0);
    expect(recovery.recoveries).toBeGreaterThanOrEqual(orphaned);
  }, 90_000);
});
