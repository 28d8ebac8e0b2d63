/**
 * A wake-up never waits for the poll: work enqueued into a busy queue, while the worker's claims (plain ones, and
 * those riding in its outcome writes) are in flight, starts within seconds although the poll interval is a minute.
 * A claim whose snapshot predates an enqueue cannot take it, so the wake-up that arrives meanwhile must lead to
 * another claim after it.
 */
import { Injectable } from '@nestjs/common';
import { Workflow } from 'nest-dedup-queue';
import { useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const WORKER_CONCURRENCY = 8;
const ROUNDS = 30;
const BACKGROUND = 120;
const LATE_WAVES = 6;
/** Far below the 60 s poll: a lost wake-up shows as a workflow still not started when this runs out. */
const START_WITHIN_MS = 15_000;

@Injectable()
class WaveTasks {
  readonly started = new Set<string>();

  @Workflow()
  async quick(id: string): Promise<void> {
    this.started.add(id);
    await new Promise((resolve) => setImmediate(resolve));
  }

  @Workflow()
  async brief(id: string): Promise<void> {
    this.started.add(id);
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
    for (let round = 0; round < ROUNDS; round++) {
      const background = Array.from({ length: BACKGROUND }, (_, n) => `r${round}-b${n}`);
      const late: string[] = [];
      await app.queues.enqueueMany(
        'waves',
        round % 2 === 0 ? tasks.quick : tasks.brief,
        background.map((id) => ({ args: [id] })),
      );
      // Later waves land while the background drains: each enqueue commits while claims are in flight.
      for (let wave = 0; wave < LATE_WAVES; wave++) {
        await waitFor(() => tasks.started.size > 0 && background.filter((id) => tasks.started.has(id)).length >= wave);
        const ids = Array.from({ length: 1 + (wave % 3) }, (_, n) => `r${round}-w${wave}-${n}`);
        late.push(...ids);
        await app.queues.enqueueMany(
          'waves',
          tasks.quick,
          ids.map((id) => ({ args: [id] })),
        );
      }
      const all = [...background, ...late];
      await waitFor(() => all.every((id) => tasks.started.has(id)), {
        what: `every workflow of round ${round} started`,
        timeoutMs: START_WITHIN_MS,
      }).catch(async (error: Error) => {
        const notStarted = (await statuses(all.filter((id) => !tasks.started.has(id)))).map(
          ({ id, status }) => `${id}: ${status}`,
        );
        throw new Error(`${error.message}; not started: ${notStarted.join(', ')}`);
      });
    }
    const rows = await suite.pool.query<{ status: string; count: string }>(
      `SELECT status, count(*) FROM "${suite.schema}".workflows GROUP BY status`,
    );
    expect(rows.rows.filter((row) => row.status === 'ENQUEUED')).toEqual([]);
    expect(tasks.started.size).toBe(ROUNDS * (BACKGROUND + 1 + 2 + 3 + 1 + 2 + 3));
  }, 180_000);
});
