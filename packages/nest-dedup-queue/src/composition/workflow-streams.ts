import type { QueueDatabase } from '../database/connection/queue-database';
import type { EntityManager } from 'typeorm';
import {
  CLOSE_STREAM_STEP_PREFIX,
  WRITE_STREAM_STEP_PREFIX,
  type StreamAppend,
  type StreamAppendResult,
  type StreamItem,
  workflowStreamStore,
} from '../database/streams/workflow-stream.store';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { StreamClosedError } from '../errors/stream-closed.error';
import { StreamLimitError } from '../errors/stream-limit.error';
import { type ExecutionFrame, executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunction } from '../execution/inside-workflow-function';
import { WorkflowExecution } from '../execution/workflow-execution';
import { abortableDelay, backoffDelayMs } from '../utils/backoff';
import { requiredKey, storedArgument } from '../utils/enqueue-options.validation';

/** How an append waits for an unavailable database (as a step's checkpoint does). */
const APPEND_RETRY = { initialDelayMs: 100, maxDelayMs: 2000 };
/** How often an append is tried again after another writer took its offset (a run that lost its workflow). */
const MAX_RACED_APPENDS = 10;

/** This process's readers of each database's streams: told when a write here changed a workflow's stream. */
const readersOfDatabases = new WeakMap<QueueDatabase, (workflowId: string) => void>();

/** Gives the streams of `database` this process's readers (the readers' service does, at boot). */
export function attachStreamReaders(database: QueueDatabase, hint: (workflowId: string) => void): void {
  readersOfDatabases.set(database, hint);
}

/**
 * Appends `value` (stored as JSON) to the stream `key` of the running workflow, at the stream's next offset (0, 1,
 * ...); `QueueService.readStream(workflowId, key)` and `streamEvents` read it from any process, pushed as it is
 * written. Called in the workflow body, the write is recorded at the workflow's position (a step named
 * `writeStream <key>`, whose output is the offset) by the statement that appends it: a re-executed workflow (a
 * retry, a recovery after its process died) does not append it again. Called inside a step, it is appended each
 * time the step runs (at least once; exactly once in a `transactional` step, with the step's transaction). Values
 * appear in the order of the calls, awaited or not (writes made while one is in flight go in one statement). Every
 * stream of a workflow closes when the workflow finishes, whatever its outcome.
 *
 * @throws DedupQueueError when called outside a running workflow (inside a `@Workflow()` method)
 * @throws InvalidArgumentError when `key` is not a non-empty string of at most 255 characters, or `value` cannot
 *   be stored as JSON or is over `inputLimits` (`maxValueBytes`, `maxDepth`)
 * @throws StreamLimitError when the value would take the stream past its cap (`inputLimits.maxStreamValues`,
 *   `maxStreamBytes`)
 * @throws StreamClosedError when `closeStream(key)` closed the stream
 */
export const writeStream = insideWorkflowFunction('writeStream', async (key: string, value: unknown): Promise<void> => {
  const frame = frameOf('writeStream');
  requiredKey(key, 'key');
  await appendToStream(frame, key, storedArgument(value, 'value', frame.execution.database.inputLimits));
});

/**
 * Closes the stream `key` of the running workflow: its readers end after its last value, and nothing more can be
 * written to it. Recorded at the workflow's position like `writeStream` (a step named `closeStream <key>`). Closing
 * a closed stream does nothing; closing a stream never written makes it an empty one. A workflow's streams close by
 * themselves when it finishes: call it to end a stream earlier.
 *
 * @throws DedupQueueError when called outside a running workflow (inside a `@Workflow()` method)
 * @throws InvalidArgumentError when `key` is not a non-empty string of at most 255 characters
 */
export const closeStream = insideWorkflowFunction('closeStream', async (key: string): Promise<void> => {
  const frame = frameOf('closeStream');
  requiredKey(key, 'key');
  await appendToStream(frame, key, null);
});

function frameOf(call: string): ExecutionFrame {
  const frame = executionFrames.getStore();
  if (!frame)
    throw new DedupQueueError(`${call}() is only available while a workflow runs (inside a @Workflow() method)`);
  return frame;
}

/**
 * Appends a value (or the close, for null): from the body, recorded at the workflow's next position (re-executed,
 * it returns at once); from a step, each time the step runs.
 */
async function appendToStream(frame: ExecutionFrame, key: string, valueJson: string | null): Promise<void> {
  const { execution } = frame;
  if (!(execution instanceof WorkflowExecution)) {
    throw new DedupQueueError('writeStream() and closeStream() need the run of a @Workflow() method');
  }
  const bytes = valueJson === null ? 0 : Buffer.byteLength(valueJson);
  if (frame.inStep) return appenderOf(execution, key).append({ valueJson, bytes, stepIndex: null }, frame.manager);
  const { index, recorded } = execution.takePosition();
  if (recorded) {
    const name = stepNameOf(key, valueJson === null);
    if (recorded.name !== name) throw execution.mismatchAt(index, recorded.name, name);
    return;
  }
  return appenderOf(execution, key).append({ valueJson, bytes, stepIndex: index });
}

/** The name a body's write (or close) is recorded under at its position. */
function stepNameOf(key: string, closing: boolean): string {
  return `${closing ? CLOSE_STREAM_STEP_PREFIX : WRITE_STREAM_STEP_PREFIX}${key}`;
}

/** The appenders of each run, by stream key. */
const appendersOfRuns = new WeakMap<WorkflowExecution, Map<string, StreamAppender>>();
/** The runs whose appends set their workflow's `has_streams` already (a run's first append does). */
const flaggedRuns = new WeakSet<WorkflowExecution>();

function appenderOf(execution: WorkflowExecution, key: string): StreamAppender {
  let appenders = appendersOfRuns.get(execution);
  if (!appenders) appendersOfRuns.set(execution, (appenders = new Map<string, StreamAppender>()));
  let appender = appenders.get(key);
  if (!appender) appenders.set(key, (appender = new StreamAppender(execution, key)));
  return appender;
}

/** How many values one statement appends at most. */
const MAX_BATCH = 500;

interface PendingItem extends StreamItem {
  manager?: EntityManager;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * The appends of one run to one stream: one statement at a time, in call order; the values that came while one was
 * in flight go together in the next (a close, and a write in a transactional step, go alone). So a body that writes
 * without awaiting each write gets its values in call order, at one statement per batch.
 */
class StreamAppender {
  private readonly pending: PendingItem[] = [];
  private flushing = false;
  /** How many of the next items go one by one (a batch of which a position had been recorded). */
  private oneByOne = 0;

  constructor(
    private readonly execution: WorkflowExecution,
    private readonly key: string,
  ) {}

  append(item: StreamItem, manager?: EntityManager): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ ...item, manager, resolve, reject });
      if (!this.flushing) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    while (this.pending.length > 0) {
      const batch = this.nextBatch();
      try {
        await this.write(batch);
      } catch (error) {
        for (const item of batch) item.reject(error);
      }
    }
    this.flushing = false;
  }

  /** The next items to append together: consecutive values outside a transactional step, or one item alone. */
  private nextBatch(): PendingItem[] {
    const batchable = (item: PendingItem) => item.valueJson !== null && !item.manager;
    let count = 1;
    if (this.oneByOne > 0) this.oneByOne -= 1;
    else if (batchable(this.pending[0])) {
      while (count < MAX_BATCH && count < this.pending.length && batchable(this.pending[count])) count++;
    }
    return this.pending.splice(0, count);
  }

  private async write(batch: PendingItem[]): Promise<void> {
    const { context, database } = this.execution;
    const closing = batch[0].valueJson === null;
    const manager = batch[0].manager;
    const append: StreamAppend = {
      key: this.key,
      items: batch,
      stepName: stepNameOf(this.key, closing),
      maxValues: database.inputLimits.maxStreamValues,
      maxBytes: database.inputLimits.maxStreamBytes,
    };
    const result = await this.appendWithRetries(append, manager);
    switch (result.outcome) {
      case 'appended': {
        // NOTE: a transactional step's append commits (or not) with the step: a later append sets the flag again.
        if (!manager) flaggedRuns.add(this.execution);
        if (!manager && result.appended > 0) readersOfDatabases.get(database)?.(context.workflowId);
        let { values, bytes } = result;
        for (const [index, item] of batch.entries()) {
          if (index >= result.appended) {
            item.reject(
              values >= append.maxValues
                ? new StreamLimitError(context.workflowId, this.key, 'maxStreamValues', append.maxValues, values)
                : new StreamLimitError(context.workflowId, this.key, 'maxStreamBytes', append.maxBytes, bytes),
            );
            continue;
          }
          values += 1;
          bytes += item.bytes;
          item.resolve();
        }
        return;
      }
      case 'recorded':
        // NOTE: a position of the batch was recorded by an earlier send of this statement: each item alone.
        if (batch.length === 1) return batch[0].resolve();
        this.pending.unshift(...batch);
        this.oneByOne = batch.length;
        return;
      case 'not-owned': {
        const lost = this.execution.ownershipLost();
        for (const item of batch) item.reject(lost);
        return;
      }
      case 'closed':
        for (const item of batch) {
          if (item.valueJson === null) item.resolve();
          else item.reject(new StreamClosedError(context.workflowId, this.key));
        }
        return;
      default:
        throw new DedupQueueError(
          `Stream "${this.key}" of workflow "${context.workflowId}": another writer kept taking its next offsets`,
        );
    }
  }

  /**
   * Sends the append: while the database is unavailable it waits and tries again (a body's append is recorded in
   * the same statement, so a resent one appends nothing twice), and after another writer took its offsets it tries
   * again at once, a few times.
   */
  private async appendWithRetries(append: StreamAppend, manager?: EntityManager): Promise<StreamAppendResult> {
    const { context, database } = this.execution;
    const writer = {
      queueName: this.execution.storedQueueName,
      workflowId: context.workflowId,
      attempt: context.attempt,
      flagged: flaggedRuns.has(this.execution),
    };
    let result: StreamAppendResult = { outcome: 'raced' };
    for (let attempt = 1, raced = 0; result.outcome === 'raced' && raced < MAX_RACED_APPENDS; attempt++) {
      if (context.signal.aborted) throw context.signal.reason;
      try {
        result = await workflowStreamStore(database).append(writer, append, manager);
        if (result.outcome === 'raced') raced++;
      } catch (error) {
        if (manager || !(error instanceof DatabaseUnavailableError)) throw error;
        await abortableDelay(backoffDelayMs(attempt, APPEND_RETRY), context.signal);
      }
    }
    return result;
  }
}
