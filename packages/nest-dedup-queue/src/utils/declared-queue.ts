import type { DedupQueueConfig } from '../dedup-queue.config';
import { UnknownQueueError } from '../errors/unknown-queue.error';

/** @throws UnknownQueueError when no module declared `queueName`, naming the declared ones. */
export function assertQueueDeclared(config: DedupQueueConfig, queueName: string): void {
  if (!config.queues.has(queueName)) throw new UnknownQueueError(queueName, [...config.queues.keys()]);
}
