import type { QueueDatabase } from '../database/queue-database';
import { type StreamAppendResult, workflowStreamStore } from '../database/workflow-stream.store';
import { DEFAULT_STREAM_MAX_BYTES, DEFAULT_STREAM_MAX_VALUES, MAX_KEY_LENGTH } from '../dedup-queue.constants';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { StreamClosedError } from '../errors/stream-closed.error';
import { StreamLimitError } from '../errors/stream-limit.error';
import { WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import { type ExecutionFrame, type FramedExecution, executionFrames } from '../execution/execution-frames';
import { WorkflowExecution } from '../execution/workflow-execution';
import { abortableDelay, backoffDelayMs } from '../utils/backoff';
import { exceedsCharacters } from '../utils/character-length';
import { toStoredJson } from '../utils/stored-json';

/** How an append waits for an unavailable database (as a step's checkpoint does). */
const APPEND_RETRY = { initialDelayMs: 100, maxDelayMs: 2000 };
/** How often an append is tried again after another writer took its offset (a run that lost its workflow). */
const MAX_RACED_APPENDS = 10;

/** What the streams of a module's database need from the module: the caps, and this process's readers. */
export interface StreamsOfDatabase {
  maxValues: number;
  maxBytes: number;
  /** Tells this process's readers of the workflow's streams that one changed. */
  hint(workflowId: string): void;
}

const streamsOfDatabases = new WeakMap<QueueDatabase, StreamsOfDatabase>();

/** Gives the streams of `database` their caps and this process's readers (the readers' service does, at boot). */
export function attachStreams(database: QueueDatabase, streams: StreamsOfDatabase): void {
  streamsOfDatabases.set(database, streams);
}

/** Checks a stream key given to `writeStream`, `closeStream`, `readStream` or `streamEvents`. */
export function assertStreamKey(key: unknown, field = 'key'): asserts key is string {
  if (typeof key !== 'string' || key.length === 0 || exceedsCharacters(key, MAX_KEY_LENGTH)) {
    throw new InvalidArgumentError(field, `must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`);
  }
}

/**
 * Appends `value` (stored as JSON) to the stream `key` of the running workflow, at the stream's next offset (0, 1,
 * ...); `QueueService.readStream(workflowId, key)` and `streamEvents` read it from any process, pushed as it is
 * written. Called in the workflow body, the write is recorded at the workflow's position (a step named
 * `writeStream <key>`): a re-executed workflow (a retry, a recovery after its process died) does not append it
 * again. Called inside a step, it is appended each time the step runs (at least once; exactly once in a
 * `transactional` step, with the step's transaction). Values appear in the order of the calls. Every stream of a
 * workflow closes when the workflow finishes, whatever its outcome.
 *
 * @throws DedupQueueError when called outside a running workflow (inside a `@Workflow()` method)
 * @throws InvalidArgumentError when `key` is not a non-empty string of at most 255 characters, or `value` cannot
 *   be stored as JSON
 * @throws StreamLimitError when the value would take the stream past its cap (`forRoot({ streams })`)
 * @throws StreamClosedError when `closeStream(key)` closed the stream
 */
export async function writeStream(key: string, value: unknown): Promise<void> {
  const frame = frameOf('writeStream');
  assertStreamKey(key);
  let valueJson: string;
  try {
    valueJson = toStoredJson(value, 'value');
  } catch (error) {
    throw new InvalidArgumentError('value', (error as Error).message.replace(/^value /, ''));
  }
  await appendToStream(frame, key, valueJson);
}

/**
 * Closes the stream `key` of the running workflow: its readers end after its last value, and nothing more can be
 * written to it. Recorded at the workflow's position like `writeStream` (a step named `closeStream <key>`). Closing
 * a closed stream does nothing; closing a stream never written makes it an empty one. A workflow's streams close by
 * themselves when it finishes: call it to end a stream earlier.
 *
 * @throws DedupQueueError when called outside a running workflow (inside a `@Workflow()` method)
 * @throws InvalidArgumentError when `key` is not a non-empty string of at most 255 characters
 */
export async function closeStream(key: string): Promise<void> {
  const frame = frameOf('closeStream');
  assertStreamKey(key);
  await appendToStream(frame, key, null);
}

function frameOf(call: string): ExecutionFrame {
  const frame = executionFrames.getStore();
  if (!frame)
    throw new DedupQueueError(`${call}() is only available while a workflow runs (inside a @Workflow() method)`);
  return frame;
}

/** Appends a value (or the close, for null) from the body (recorded at its position) or from a step. */
async function appendToStream(frame: ExecutionFrame, key: string, valueJson: string | null): Promise<void> {
  const { execution } = frame;
  if (frame.inStep) return appendInOrder(execution, key, valueJson, null, frame.manager);
  const stepIndex = execution.nextStep;
  await execution.runStep(
    `${valueJson === null ? 'closeStream' : 'writeStream'} ${key}`,
    () => appendInOrder(execution, key, valueJson, stepIndex, undefined),
    {},
  );
}

/** The appends of this process to each stream (workflow and key) not yet done: each waits for the one before. */
const appendsInFlight = new Map<string, Promise<unknown>>();

/** Appends after this process's earlier appends to the same stream, so that values land in call order. */
function appendInOrder(
  execution: FramedExecution,
  key: string,
  valueJson: string | null,
  stepIndex: number | null,
  manager: ExecutionFrame['manager'],
): Promise<void> {
  const stream = JSON.stringify([execution.context.workflowId, key]);
  const before = appendsInFlight.get(stream) ?? Promise.resolve();
  const done = before.then(
    () => append(execution, key, valueJson, stepIndex, manager),
    () => append(execution, key, valueJson, stepIndex, manager),
  );
  const settled = done.catch(() => undefined);
  appendsInFlight.set(stream, settled);
  void settled.then(() => {
    if (appendsInFlight.get(stream) === settled) appendsInFlight.delete(stream);
  });
  return done;
}

/** Runs whose first append set their workflow's `has_streams` (the end of the workflow then hints its readers). */
const flaggedRuns = new WeakMap<FramedExecution, true>();

async function append(
  execution: FramedExecution,
  key: string,
  valueJson: string | null,
  stepIndex: number | null,
  manager: ExecutionFrame['manager'],
): Promise<void> {
  const { context, database } = execution;
  const streams = streamsOfDatabases.get(database);
  const store = workflowStreamStore(database);
  const writer = {
    queueName: context.queueName,
    workflowId: context.workflowId,
    attempt: context.attempt,
    flagged: flaggedRuns.has(execution),
  };
  const request = {
    key,
    valueJson,
    bytes: valueJson === null ? 0 : Buffer.byteLength(valueJson),
    stepIndex,
    maxValues: streams?.maxValues ?? DEFAULT_STREAM_MAX_VALUES,
    maxBytes: streams?.maxBytes ?? DEFAULT_STREAM_MAX_BYTES,
  };
  let result: StreamAppendResult | undefined;
  for (let attempt = 1; ; attempt++) {
    if (context.signal.aborted) throw context.signal.reason;
    try {
      result = await store.append(writer, request, manager);
    } catch (error) {
      if (manager || !(error instanceof DatabaseUnavailableError)) throw error;
      await abortableDelay(backoffDelayMs(attempt, APPEND_RETRY), context.signal);
      continue;
    }
    if (result.outcome !== 'raced' || attempt >= MAX_RACED_APPENDS) break;
  }
  if (result.outcome === 'appended') {
    // NOTE: a transactional step's append commits (or not) with the step: the next append sets the flag again.
    if (!manager) {
      flaggedRuns.set(execution, true);
      streams?.hint(context.workflowId);
    }
    return;
  }
  switch (result.outcome) {
    case 'not-owned':
      throw execution instanceof WorkflowExecution
        ? execution.ownershipLost()
        : new WorkflowInterruptedError(context.workflowId, 'ownership-lost');
    case 'closed':
      if (valueJson === null) return;
      throw new StreamClosedError(context.workflowId, key);
    case 'full':
      throw result.values >= request.maxValues
        ? new StreamLimitError(context.workflowId, key, 'maxValues', request.maxValues, result.values)
        : new StreamLimitError(context.workflowId, key, 'maxBytes', request.maxBytes, result.bytes);
    default:
      throw new DedupQueueError(
        `Stream "${key}" of workflow "${context.workflowId}": another writer kept taking its next offset`,
      );
  }
}
