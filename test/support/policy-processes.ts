/**
 * The processes of the duplicate-policy races: two enqueuing processes (test/fixtures/child-policy-enqueuer.ts,
 * named `a` and `b`) that fire when told over IPC, and a worker process (child-policy-worker.ts) that runs queue
 * `live`, whose bodies wait until their label is released in `policy_release`.
 */
import type { Pool } from 'pg';
import { FixtureProcess, spawnFixture } from '../fixtures/child-harness';

export interface PolicyProcesses {
  /** The enqueuing processes, `a` then `b`. */
  readonly enqueuers: FixtureProcess[];
  /** Releases every label the workflows recorded, asks each process to stop and waits up to 10 s for it to exit. */
  stop(): Promise<void>;
}

/** Starts the enqueuers (declaring `enqueuerQueues`, comma-separated) and the worker; waits until all have booted. */
export async function startPolicyProcesses(
  pool: Pool,
  schema: string,
  enqueuerQueues: string,
): Promise<PolicyProcesses> {
  const enqueuers = ['a', 'b'].map((name) =>
    spawnFixture('child-policy-enqueuer.ts', `enqueuer-${name}`, {
      SCHEMA: schema,
      CHILD_NAME: name,
      QUEUES: enqueuerQueues,
    }),
  );
  const worker = spawnFixture('child-policy-worker.ts', 'worker', { SCHEMA: schema, QUEUES: 'live' });
  const all = [...enqueuers, worker];
  await Promise.all(all.map((child) => child.message('ready')));
  return {
    enqueuers,
    stop: async () => {
      await pool.query(
        `INSERT INTO "${schema}".policy_release (label) SELECT label FROM "${schema}".policy_events ON CONFLICT DO NOTHING`,
      );
      for (const child of all) if (!child.hasEnded) child.send({ type: 'stop' });
      await Promise.all(all.map((child) => child.waitForExit(10_000).catch(() => undefined)));
    },
  };
}
