import { MAX_KEY_LENGTH } from '../dedup-queue.constants';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { DuplicatePolicy, EnqueueOptions, WhenRunningPolicy } from '../interfaces/enqueue-options.interface';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import { callerTransaction } from '../transactions/caller-transaction';
import { unknownKey } from './known-keys';
import { UnstorableValueError, ValueLimits, toStoredJson } from './stored-json';
import { characterLength, exceedsCharacters } from './character-length';

/** Enqueue options checked and normalised; nothing is written before this succeeds. */
export interface ValidEnqueueOptions {
  deduplicationId: string | null;
  workflowId: string | null;
  timeoutMs: number | null;
  partitionKey: string | null;
  priority: number;
  runAt: Date | null;
  delayMs: number | null;
  maxDelayMs: number | null;
  onDuplicate: DuplicatePolicy;
  whenRunning: WhenRunningPolicy;
  deduplicationWindowMs: number | null;
  releaseKeyOnError: boolean;
  requireSameArgs: boolean;
  /** `version`, when given. */
  version: number | null;
  /** The caller's transaction (`db` or `manager`), if the enqueue joins one. */
  transaction: TransactionSql | undefined;
}

const DUPLICATE_POLICIES: readonly DuplicatePolicy[] = ['reject', 'return-existing', 'replace', 'supersede', 'send'];
const WHEN_RUNNING_POLICIES: readonly WhenRunningPolicy[] = ['reject', 'return-existing', 'queue-next'];

const MAX_INT = 2_147_483_647;
/** Every key `EnqueueOptions` has: any other is refused (a misspelt `deduplicationID` would turn deduplication off). */
const ENQUEUE_OPTION_KEYS: readonly (keyof EnqueueOptions)[] = [
  'deduplicationId',
  'workflowId',
  'timeoutMs',
  'partitionKey',
  'priority',
  'delayMs',
  'maxDelayMs',
  'runAt',
  'onDuplicate',
  'whenRunning',
  'deduplicationWindowMs',
  'releaseKeyOnError',
  'requireSameArgs',
  'version',
  'manager',
  'db',
];
/** The earliest instant a Postgres `timestamptz` holds (4714-11-24 BC); later JavaScript dates all fit. */
const EARLIEST_TIMESTAMP_MS = Date.UTC(-4713, 10, 24);

/** Checks `options` of one enqueue; `partitioned` says whether the queue accepts a `partitionKey`. */
export function validateEnqueueOptions(
  options: EnqueueOptions,
  queueName: string,
  partitioned: boolean,
  field = 'options',
): ValidEnqueueOptions {
  if (options === null || typeof options !== 'object') {
    throw new InvalidArgumentError(field, 'must be an object');
  }
  const unknown = unknownKey(options, ENQUEUE_OPTION_KEYS);
  if (unknown) throw new InvalidArgumentError(`${field}.${unknown.key}`, unknown.reason);
  const named = (name: string) => `${field}.${name}`;
  const partitionKey = optionalKey(options.partitionKey, named('partitionKey'));
  if (partitionKey !== null && !partitioned) {
    throw new InvalidArgumentError(
      named('partitionKey'),
      `needs a partitioned queue; declare partitionConcurrency (or a per-partition rate limit) on queue "${queueName}"`,
    );
  }
  if (options.delayMs !== undefined && options.runAt !== undefined) {
    throw new InvalidArgumentError(field, 'give delayMs or runAt, not both');
  }
  if (options.runAt !== undefined && !(options.runAt instanceof Date && !Number.isNaN(options.runAt.getTime()))) {
    throw new InvalidArgumentError(named('runAt'), 'must be a valid Date');
  }
  if (options.runAt !== undefined && options.runAt.getTime() < EARLIEST_TIMESTAMP_MS) {
    throw new InvalidArgumentError(named('runAt'), 'is earlier than Postgres can store (4714 BC); give a real date');
  }
  const onDuplicate = oneOf(options.onDuplicate, DUPLICATE_POLICIES, named('onDuplicate')) ?? 'reject';
  const whenRunning = oneOf(options.whenRunning, WHEN_RUNNING_POLICIES, named('whenRunning')) ?? 'reject';
  if (options.whenRunning !== undefined && onDuplicate !== 'replace') {
    throw new InvalidArgumentError(named('whenRunning'), "only applies with onDuplicate: 'replace'");
  }
  const deduplicationId = optionalKey(options.deduplicationId, named('deduplicationId'));
  if (onDuplicate !== 'reject' && deduplicationId === null) {
    throw new InvalidArgumentError(
      named('onDuplicate'),
      `'${onDuplicate}' needs a deduplicationId to find duplicates by`,
    );
  }
  const deduplicationWindowMs = optionalInteger(options.deduplicationWindowMs, named('deduplicationWindowMs'), 1);
  if (deduplicationWindowMs !== null && whenRunning === 'queue-next') {
    throw new InvalidArgumentError(field, "a deduplication window and whenRunning: 'queue-next' cannot be combined");
  }
  if (options.requireSameArgs !== undefined && typeof options.requireSameArgs !== 'boolean') {
    throw new InvalidArgumentError(named('requireSameArgs'), 'must be a boolean');
  }
  if (options.requireSameArgs === true && deduplicationId === null) {
    throw new InvalidArgumentError(named('requireSameArgs'), 'needs a deduplicationId to compare with its holder');
  }
  const maxDelayMs = optionalInteger(options.maxDelayMs, named('maxDelayMs'), 1);
  const delayMs = optionalInteger(options.delayMs, named('delayMs'), 0);
  if (maxDelayMs !== null && (onDuplicate !== 'replace' || delayMs === null)) {
    throw new InvalidArgumentError(named('maxDelayMs'), "only applies with onDuplicate: 'replace' and delayMs");
  }
  if (maxDelayMs !== null && (delayMs as number) > maxDelayMs) {
    throw new InvalidArgumentError(named('delayMs'), `must not exceed maxDelayMs (${maxDelayMs})`);
  }
  const transaction = callerTransaction(options, field);
  return {
    onDuplicate,
    whenRunning,
    deduplicationWindowMs,
    releaseKeyOnError: options.releaseKeyOnError === true,
    requireSameArgs: options.requireSameArgs === true,
    version: optionalVersion(options.version, named('version')),
    transaction,
    deduplicationId,
    workflowId: optionalKey(options.workflowId, named('workflowId')),
    timeoutMs: optionalInteger(options.timeoutMs, named('timeoutMs'), 1),
    partitionKey,
    priority: optionalInteger(options.priority, named('priority'), -MAX_INT) ?? 0,
    runAt: options.runAt ?? null,
    delayMs,
    maxDelayMs,
  };
}

/**
 * A key (a deduplication ID, workflow ID, partition key, topic, idempotency key or event key), or null when not
 * given: 1 to `MAX_KEY_LENGTH` characters (Unicode code points), no NUL.
 */
export function optionalKey(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new InvalidArgumentError(field, `must be a string, got ${typeof value}`);
  if (value.length === 0) throw new InvalidArgumentError(field, 'must not be empty');
  if (value.includes('\u0000')) throw new InvalidArgumentError(field, 'must not contain the NUL character');
  if (exceedsCharacters(value, MAX_KEY_LENGTH)) {
    const got = characterLength(value);
    throw new InvalidArgumentError(field, `must be at most ${MAX_KEY_LENGTH} characters, got ${got}`);
  }
  return value;
}

/** `EnqueueOptions.version` (or a fork's): a positive integer, or null when not given. */
export function optionalVersion(value: unknown, field: string): number | null {
  if (value === undefined || value === null) return null;
  if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > MAX_INT) {
    throw new InvalidArgumentError(field, `must be a workflow version, an integer from 1 to ${MAX_INT}`);
  }
  return value as number;
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], field: string): T | null {
  if (value === undefined || value === null) return null;
  if (!allowed.includes(value as T)) {
    throw new InvalidArgumentError(field, `must be one of ${allowed.map((v) => `'${v}'`).join(', ')}`);
  }
  return value as T;
}

function optionalInteger(value: unknown, field: string, min: number): number | null {
  if (value === undefined || value === null) return null;
  if (!Number.isInteger(value) || (value as number) < min || (value as number) > MAX_INT) {
    throw new InvalidArgumentError(field, `must be an integer from ${min} to ${MAX_INT}`);
  }
  return value as number;
}

/** A key that must be given (see `optionalKey`). */
export function requiredKey(value: unknown, field: string): string {
  const key = optionalKey(value, field);
  if (key === null) throw new InvalidArgumentError(field, 'must be a non-empty string');
  return key;
}

/**
 * A value as JSON text, or an `InvalidArgumentError` naming the value JSON cannot hold or the limit it is over.
 */
export function storedArgument(value: unknown, field: string, limits: ValueLimits): string {
  try {
    return toStoredJson(value, field, limits);
  } catch (error) {
    if (error instanceof UnstorableValueError) throw new InvalidArgumentError(error.path, error.reason);
    throw error;
  }
}

/** The arguments as JSON text, or an `InvalidArgumentError` naming the value JSON cannot hold. */
export function serialiseArgs(args: unknown, field: string, limits: ValueLimits): string {
  if (!Array.isArray(args)) {
    throw new InvalidArgumentError(field, "must be an array of the workflow's arguments");
  }
  return storedArgument(args, field, limits);
}
