/**
 * A wake-up never waits for the poll: work enqueued into a busy queue, while the worker's claims (plain ones, and
 * those riding in its outcome writes) are in flight, starts within seconds although the poll interval is a minute.
 * A claim whose snapshot predates an enqueue cannot take it, so the wake-up that arrives meanwhile must lead to
 * another claim after it.
 */
import { AsyncResource } from 'node:async_hooks';
import { Injectable } from '@nestjs/common';
import { Workflow } from 'nest-dedup-queue';
import { useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const WORKER_CONCURRENCY = 8;
const ROUNDS = 80;
const BACKGROUND = 120;
/** The background bodies whose start enqueues a later wave: most near the end, where claims come back short. */
const WAVE_AFTER = [40, 80, 100, 108, 112, 115, 117, 119];
/** Far below the 60 s poll: a lost wake-up shows as a workflow still not started when this runs out. */
const START_WITHIN_MS = 15_000;

@Injectable()
class WaveTasks {
  readonly started = new Set<string>();
  /** Called with the ID of each body that starts (the test enqueues waves from it). */
  onStart: (id: string) => void = () => undefined;

  @Workflow()
  async quick(id: string): Promise<void> {
    this.started.add(id);
    this.onStart(id);
    await new Promise((resolve) => setImmediate(resolve));
  }

  @Workflow()
  async brief(id: string): Promise<void> {
    this.started.add(id);
    this.onStart(id);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

describe('a wake-up that arrives while a claim is in flight', () => {
  const suite = useQueueApp<WaveTasks>(
    'wake_during_claim',
    { queues: [{ name: 'waves', workerConcurrency: WORKER_CONCURRENCY }], pollIntervalMs: 60_000 },
    [WaveTasks],
    { tasks: WaveTasks },
  );

  it(`starts every workflow of ${ROUNDS} rounds of waves within seconds, with a 60 s poll`, async () => {
    const { app, tasks } = suite;
    const statuses = async (ids: string[]) =>
      (
        await suite.pool.query<{ id: string; status: string }>(
          `SELECT inputs->>0 AS id, status FROM "${suite.schema}".workflows WHERE inputs->>0 = ANY($1)`,
          [ids],
        )
      ).rows;
    const startedWithin = async (ids: string[], what: string) =>
      waitFor(() => ids.every((id) => tasks.started.has(id)), { what, timeoutMs: START_WITHIN_MS }).catch(
        async (error: Error) => {
          const notStarted = await statuses(ids.filter((id) => !tasks.started.has(id)));
          throw new Error(
            `${error.message}; not started: ${notStarted.map((row) => `${row.id}: ${row.status}`).join(', ')}`,
          );
        },
      );
    // NOTE: the waves are enqueued in the test's async context, not in the body's (which would enqueue children).
    const outside = new AsyncResource('wave-enqueues');
    let expected = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const background = Array.from({ length: BACKGROUND }, (_, n) => `r${round}-b${n}`);
      const waves: Array<{ ids: string[]; enqueued?: Promise<unknown> }> = WAVE_AFTER.map((_, wave) => ({
        ids: Array.from({ length: 1 + (wave % 3) }, (__, n) => `r${round}-w${wave}-${n}`),
      }));
      // Each wave is enqueued as a background body starts: its commit lands while claims are in flight.
      tasks.onStart = (id) => {
        const wave = WAVE_AFTER.findIndex((n) => id === `r${round}-b${n}`);
        if (wave < 0) return;
        const { ids } = waves[wave];
        waves[wave].enqueued = outside.runInAsyncScope(() =>
          app.queues.enqueueMany(
            'waves',
            tasks.quick,
            ids.map((waveId) => ({ args: [waveId] })),
          ),
        );
      };
      await app.queues.enqueueMany(
        'waves',
        round % 2 === 0 ? tasks.quick : tasks.brief,
        background.map((id) => ({ args: [id] })),
      );
      const all = [...background, ...waves.flatMap(({ ids }) => ids)];
      expected += all.length;
      await startedWithin(background, `the background of round ${round} started`);
      await Promise.all(waves.map(({ enqueued }) => enqueued as Promise<unknown>));
      await startedWithin(all, `every workflow of round ${round} started`);
    }
    const enqueued = await suite.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${suite.schema}".workflows WHERE status = 'ENQUEUED'`,
    );
    expect(enqueued.rows[0].n).toBe(0);
    expect(tasks.started.size).toBe(expected);
  }, 240_000);
});
