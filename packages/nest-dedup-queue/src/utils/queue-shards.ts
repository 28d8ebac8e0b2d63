import { createHash } from 'node:crypto';
import { SHARD_SEPARATOR } from '../dedup-queue.constants';

/** The name shard `shard` of queue `queueName` is stored under (with `distribution: 'citus'` and `shards` above 1). */
export function shardQueueName(queueName: string, shard: number): string {
  return `${queueName}${SHARD_SEPARATOR}${shard}`;
}

/** The queue a stored queue name belongs to: the name itself, or the queue of a shard's name. */
export function logicalQueueName(storedName: string): string {
  const separator = storedName.indexOf(SHARD_SEPARATOR);
  return separator < 0 ? storedName : storedName.slice(0, separator);
}

/**
 * The shard of `key` among `shards`: the first 32 bits of its MD5, modulo `shards`. The same rule in SQL:
 * `('x' || substr(md5(key), 1, 8))::bit(32)::bigint % shards`.
 */
export function shardOf(key: string, shards: number): number {
  return Number.parseInt(createHash('md5').update(key).digest('hex').slice(0, 8), 16) % shards;
}

/** What the shard rules read of the module's configuration (`DedupQueueConfig` is one). */
export interface QueueShardSettings {
  readonly distribution: 'single' | 'citus';
  readonly queues: ReadonlyMap<string, { readonly shards?: number }>;
}

/** How many shards a queue's rows are stored in: its declared `shards` on Citus, else 1 (one name, its own). */
export function storedShards(config: QueueShardSettings, queueName: string): number {
  return config.distribution === 'citus' ? (config.queues.get(queueName)?.shards ?? 1) : 1;
}

/**
 * Every name the rows of `queueName` may be stored under: its own, and with shards those of its shards. Its own name
 * holds what was enqueued before it declared shards and what `enqueue_workflow` (SQL) enqueues, so its workers drain
 * it as one more shard (see docs/citus.md, "A hot queue").
 */
export function storedQueueNames(config: QueueShardSettings, queueName: string): string[] {
  const shards = storedShards(config, queueName);
  if (shards === 1) return [queueName];
  return [queueName, ...Array.from({ length: shards }, (_, shard) => shardQueueName(queueName, shard))];
}

/**
 * The name a new workflow of `queueName` is stored under: its shard follows from its deduplication ID, or its
 * workflow ID when it has none (`shardKey`), so that every workflow of one key is in one shard, where the unique index
 * decides.
 */
export function storedQueueName(config: QueueShardSettings, queueName: string, shardKey: string): string {
  const shards = storedShards(config, queueName);
  return shards === 1 ? queueName : shardQueueName(queueName, shardOf(shardKey, shards));
}

/** The stored names of every declared queue. */
export function everyStoredQueueName(config: QueueShardSettings): string[] {
  return [...config.queues.keys()].flatMap((queueName) => storedQueueNames(config, queueName));
}
