import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { optionalKey } from '../utils/enqueue-options.validation';
import { executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunction } from '../execution/inside-workflow-function';
import type { RecvOptions } from '../interfaces/message-options.interface';
import { runWaitsOf } from './run-waits';

export { DUPLICATE_TOPIC } from '../database/messages/message.store';

/** How long `recv` waits by default (as DBOS's `recv`): 60 seconds. */
export const DEFAULT_RECV_TIMEOUT_MS = 60_000;

/** The stored topic of messages sent without one. */
export const DEFAULT_TOPIC = '';

/** Checks a topic given to `send` or `recv` (a key: see `optionalKey`); returns the stored topic. */
export function topicOf(topic: unknown, field: string): string {
  return optionalKey(topic, field) ?? DEFAULT_TOPIC;
}

/**
 * Receives a message sent to the running workflow (`QueueService.send`): the oldest message of `topic` (of the
 * default topic when left out) not yet received, or `undefined` once `timeoutMs` passed without one. Each message is
 * received once. What it returns is recorded at the workflow's next step positions, with its deadline, so a
 * re-executed workflow receives the same message at the same point (or times out again) without waiting. While it
 * waits for more than a second, the workflow is suspended as in `sleep()`: `WAITING`, keeping its deduplication key
 * but no slot, woken by a message of that topic or by the timeout.
 *
 * @param topic the topic to receive from; default: the messages sent without a topic
 * @param options `timeoutMs`: how long to wait (default 60 000; `Infinity` waits for as long as it takes)
 * @throws DedupQueueError outside a running workflow, or inside a step
 * @throws InvalidArgumentError for an empty topic or a negative timeout
 */
export const recv = insideWorkflowFunction(
  'recv',
  async <T = unknown>(topic?: string, options: RecvOptions = {}): Promise<T | undefined> => {
    const stored = topicOf(topic, 'topic');
    const timeoutMs = options.timeoutMs ?? DEFAULT_RECV_TIMEOUT_MS;
    if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs < 0) {
      throw new InvalidArgumentError('options.timeoutMs', 'must be a number of milliseconds, 0 or more, or Infinity');
    }
    const frame = executionFrames.getStore();
    if (!frame)
      throw new DedupQueueError('recv() is only available while a workflow runs (inside a @Workflow() method)');
    const waits = runWaitsOf(frame.execution);
    if (frame.inStep || !waits) {
      throw new DedupQueueError('recv() cannot be called inside a step: call it in the workflow body');
    }
    return waits.recv<T>(stored, timeoutMs);
  },
);
