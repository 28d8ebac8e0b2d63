/**
 * A `queue-next` follow-up takes its key in the transaction in which its holder ends: raced many times, a holder
 * ending (its outcome written, a cancel) while a `queue-next` call inserts its follow-up, never leaves the follow-up
 * waiting with no holder of its key. The heartbeat's repair sweep is kept out of the way (a heartbeat of a minute), so
 * what is checked is the ending transaction alone.
 */
import { Injectable } from '@nestjs/common';
import { Workflow, workflowContext } from 'nest-dedup-queue';
import { useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

/** Holders' bodies return when the test releases their workflow ID (or when cancelled); follow-ups' at once. */
@Injectable()
class HeldTasks {
  private readonly releases = new Map<string, () => void>();
  private readonly started = new Map<string, () => void>();

  @Workflow({ queue: 'held' })
  async hold(label: string): Promise<string> {
    const { workflowId, signal } = workflowContext();
    if (label === 'follow-up') return label;
    await new Promise<void>((resolve) => {
      this.releases.set(workflowId, resolve);
      signal.addEventListener('abort', () => resolve());
      this.started.get(workflowId)?.();
    });
    return label;
  }

  /** Resolves once `workflowId`'s body waits for its release. */
  running(workflowId: string): Promise<void> {
    if (this.releases.has(workflowId)) return Promise.resolve();
    return new Promise((resolve) => this.started.set(workflowId, resolve));
  }

  release(workflowId: string): void {
    this.releases.get(workflowId)?.();
  }
}

const ROUNDS = 60;

const suite = useQueueApp<HeldTasks>(
  'hand_over',
  { queues: [{ name: 'held', workerConcurrency: 50 }], heartbeatIntervalMs: 60_000, leaseMs: 180_000 },
  [HeldTasks],
  { tasks: HeldTasks },
);

/** Follow-ups of the schema's queue waiting while no unfinished workflow holds their key. */
async function stranded(): Promise<string[]> {
  const { rows } = await suite.pool.query<{ workflow_id: string }>(
    `SELECT f.workflow_id FROM "${suite.schema}".workflow_queue AS f
     WHERE f.queue_name = 'held' AND f.status = 'ENQUEUED' AND f.next_deduplication_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM "${suite.schema}".workflow_queue AS h
                       WHERE h.queue_name = 'held' AND h.active_deduplication_id = f.next_deduplication_id
                         AND h.status IN ('ENQUEUED', 'PENDING', 'WAITING'))`,
  );
  return rows.map((row) => row.workflow_id);
}

it.each([
  ['its outcome is written', 'outcome'],
  ['it is cancelled', 'cancel'],
] as const)(
  `a holder ends as ${ROUNDS} follow-ups are inserted (%s): no follow-up waits without a holder`,
  async (_, how) => {
    const { queues } = suite.app;
    const tasks = suite.tasks;
    const strandedSeen = new Set<string>();
    for (let round = 0; round < ROUNDS; round++) {
      const key = `${how}-${round}`;
      const holder = await queues.enqueue('held', tasks.hold, ['holder'], { deduplicationId: key });
      await tasks.running(holder.workflowId);
      // The end and the follow-up's insert leave together, one turn of the event loop apart at most.
      const end = (): unknown =>
        how === 'outcome' ? tasks.release(holder.workflowId) : void queues.cancel(holder.workflowId);
      const followUp = (): unknown =>
        queues.enqueue('held', tasks.hold, ['follow-up'], {
          deduplicationId: key,
          onDuplicate: 'replace',
          whenRunning: 'queue-next',
        });
      const [first, second] = round % 2 === 0 ? [end, followUp] : [followUp, end];
      await Promise.all([
        Promise.resolve().then(first),
        new Promise((resolve) => setImmediate(() => resolve(second()))),
      ]);
      await waitFor(
        async () => {
          const row = await suite.pool.query(
            `SELECT 1 FROM "${suite.schema}".workflow_queue WHERE queue_name = 'held' AND workflow_id = $1
               AND status IN ('ENQUEUED', 'PENDING', 'WAITING')`,
            [holder.workflowId],
          );
          return row.rowCount === 0;
        },
        { what: `holder ${holder.workflowId} to end` },
      );
      for (const id of await stranded()) strandedSeen.add(id);
    }
    expect([...strandedSeen]).toEqual([]);
    // Every follow-up ran: none waits for a key nobody will hand it.
    await waitFor(
      async () => {
        const left = await suite.pool.query(
          `SELECT count(*)::int AS n FROM "${suite.schema}".workflow_queue WHERE queue_name = 'held'
             AND status IN ('ENQUEUED', 'PENDING', 'WAITING')`,
        );
        return left.rows[0].n === 0;
      },
      { what: 'every follow-up to run', timeoutMs: 30_000 },
    );
  },
);
