import { MAX_KEY_LENGTH } from '../dedup-queue.constants';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { EnqueueOptions } from '../interfaces/enqueue-options.interface';
import { UnstorableValueError, toStoredJson } from './stored-json';

/** Enqueue options checked and normalised; nothing is written before this succeeds. */
export interface ValidEnqueueOptions {
  deduplicationId: string | null;
  workflowId: string | null;
  timeoutMs: number | null;
  partitionKey: string | null;
  priority: number;
  runAt: Date | null;
  delayMs: number | null;
}

const MAX_INT = 2_147_483_647;

/** Checks `options` of one enqueue; `partitioned` says whether the queue accepts a `partitionKey`. */
export function validateEnqueueOptions(options: EnqueueOptions, queueName: string, partitioned: boolean): ValidEnqueueOptions {
  if (options === null || typeof options !== 'object') {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  const partitionKey = optionalKey(options.partitionKey, 'options.partitionKey');
  if (partitionKey !== null && !partitioned) {
    throw new InvalidArgumentError(
      'options.partitionKey',
      `needs a partitioned queue; declare partitionConcurrency (or a per-partition rate limit) on queue "${queueName}"`,
    );
  }
  if (options.delayMs !== undefined && options.runAt !== undefined) {
    throw new InvalidArgumentError('options', 'give delayMs or runAt, not both');
  }
  if (options.runAt !== undefined && !(options.runAt instanceof Date && !Number.isNaN(options.runAt.getTime()))) {
    throw new InvalidArgumentError('options.runAt', 'must be a valid Date');
  }
  return {
    deduplicationId: optionalKey(options.deduplicationId, 'options.deduplicationId'),
    workflowId: optionalKey(options.workflowId, 'options.workflowId'),
    timeoutMs: optionalInteger(options.timeoutMs, 'options.timeoutMs', 1),
    partitionKey,
    priority: optionalInteger(options.priority, 'options.priority', -MAX_INT) ?? 0,
    runAt: options.runAt ?? null,
    delayMs: optionalInteger(options.delayMs, 'options.delayMs', 0),
  };
}

/** A deduplication ID, workflow ID or partition key: 1 to 255 characters, no NUL. */
export function optionalKey(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new InvalidArgumentError(field, `must be a string, got ${typeof value}`);
  if (value.length === 0) throw new InvalidArgumentError(field, 'must not be empty');
  if (value.includes('\u0000')) throw new InvalidArgumentError(field, 'must not contain the NUL character');
  if (value.length > MAX_KEY_LENGTH) {
    throw new InvalidArgumentError(field, `must be at most ${MAX_KEY_LENGTH} characters, got ${value.length}`);
  }
  return value;
}

function optionalInteger(value: unknown, field: string, min: number): number | null {
  if (value === undefined || value === null) return null;
  if (!Number.isInteger(value) || (value as number) < min || (value as number) > MAX_INT) {
    throw new InvalidArgumentError(field, `must be an integer from ${min} to ${MAX_INT}`);
  }
  return value as number;
}

/** The arguments as JSON text, or an `InvalidArgumentError` naming the value JSON cannot hold. */
export function serialiseArgs(args: unknown): string {
  if (!Array.isArray(args)) {
    throw new InvalidArgumentError('args', "must be an array of the workflow's arguments");
  }
  try {
    return toStoredJson(args, 'args');
  } catch (error) {
    if (error instanceof UnstorableValueError) throw new InvalidArgumentError(error.path, error.reason);
    throw error;
  }
}
