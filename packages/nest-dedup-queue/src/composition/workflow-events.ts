import { Injectable } from '@nestjs/common';
import { QueueDatabase } from '../database/connection/queue-database';
import { setEventStepName, workflowEventStore } from '../database/events/workflow-event.store';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunction } from '../execution/inside-workflow-function';
import type { GetEventOptions } from '../interfaces/get-event-options.interface';
import { fromStoredJson } from '../utils/stored-json';
import { requiredKey, storedArgument } from '../utils/enqueue-options.validation';
import { runWaitsOf } from './run-waits';

const FIRST_POLL_MS = 10;
const MAX_POLL_MS = 500;
/** How long `getEvent` waits by default. */
export const DEFAULT_GET_EVENT_TIMEOUT_MS = 60_000;

/**
 * Publishes `value` (stored as JSON) under `key` for the running workflow; the last value set for a key wins, and
 * `QueueService.getEvent(workflowId, key)` reads it from any process. Recorded at the workflow's position like a
 * step: a re-executed workflow does not set it again. Use it to report progress, or an intermediate result, to
 * whoever follows the workflow (a caller refused with 409 can follow the holder's).
 *
 * @throws DedupQueueError when called outside a running workflow (inside a `@Workflow()` method)
 * @throws InvalidArgumentError when `key` is not a non-empty string, or `value` cannot be stored as JSON
 */
export const setEvent = insideWorkflowFunction('setEvent', async (key: string, value: unknown): Promise<void> => {
  const frame = executionFrames.getStore();
  if (!frame) {
    throw new DedupQueueError('setEvent() is only available while a workflow runs (inside a @Workflow() method)');
  }
  requiredKey(key, 'key');
  const { execution } = frame;
  const valueJson = storedArgument(value, 'value', execution.database.inputLimits);
  const { workflowId } = execution.context;
  const queueName = execution.storedQueueName;
  const store = workflowEventStore(execution.database);
  const publish = async () => {
    await store.set(queueName, workflowId, key, valueJson);
    return fromStoredJson(valueJson);
  };
  if (frame.inStep) {
    await publish();
    return;
  }
  // NOTE: the value is recorded with the position, so that a fork has each key's value as it was there.
  await execution.runStep(setEventStepName(key), publish, {});
});

/** Reads the events workflows publish with `setEvent`, waiting for a key until it is set. */
@Injectable()
export class WorkflowEvents {
  constructor(private readonly database: QueueDatabase) {}

  /** See `QueueService.getEvent`. */
  async getEvent<T = unknown>(workflowId: string, key: string, options: GetEventOptions = {}): Promise<T | undefined> {
    if (typeof workflowId !== 'string' || workflowId === '') {
      throw new InvalidArgumentError('workflowId', 'must be a non-empty string');
    }
    requiredKey(key, 'key');
    const timeoutMs = options?.timeoutMs ?? DEFAULT_GET_EVENT_TIMEOUT_MS;
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) {
      throw new InvalidArgumentError('options.timeoutMs', 'must be a number of milliseconds, 0 or more');
    }
    const frame = executionFrames.getStore();
    const waits = frame && !frame.inStep ? runWaitsOf(frame.execution) : undefined;
    if (waits) return waits.getEvent<T>(workflowId, key, timeoutMs);
    const store = workflowEventStore(this.database);
    const deadline = Date.now() + timeoutMs;
    let queueName: string | undefined;
    let pollMs = FIRST_POLL_MS;
    for (;;) {
      try {
        queueName ??= await store.queueOf(workflowId);
        const found = queueName === undefined ? undefined : await store.get(queueName, workflowId, key);
        if (found) return fromStoredJson<T>(found.valueJson);
      } catch (error) {
        if (!(error instanceof DatabaseUnavailableError) || Date.now() >= deadline) throw error;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) return undefined;
      await store.waitFor(workflowId, key, Math.min(pollMs, remaining));
      pollMs = Math.min(pollMs * 2, MAX_POLL_MS);
    }
  }
}
