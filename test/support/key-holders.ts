import { Client } from 'pg';
import { databaseUrl } from './database';

/**
 * Samples, every few milliseconds on a connection of its own, how many unfinished workflows (ENQUEUED, PENDING or
 * WAITING) hold `key` in `queue` of `schema`, until the returned function stops it and answers with the most it
 * saw and how many samples it took.
 */
export async function sampleKeyHolders(
  schema: string,
  queue: string,
  key: string,
  intervalMs: number,
): Promise<() => Promise<{ max: number; samples: number }>> {
  const client = new Client({ connectionString: databaseUrl() });
  client.on('error', () => undefined);
  await client.connect();
  let running = true;
  let max = 0;
  let samples = 0;
  const loop = (async () => {
    while (running) {
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM "${schema}".workflow_queue
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND status IN ('ENQUEUED', 'PENDING', 'WAITING')`,
        [queue, key],
      );
      max = Math.max(max, rows[0].n);
      samples += 1;
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  })();
  return async () => {
    running = false;
    await loop;
    await client.end();
    return { max, samples };
  };
}
