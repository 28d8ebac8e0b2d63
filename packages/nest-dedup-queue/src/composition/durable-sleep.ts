import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunction } from '../execution/inside-workflow-function';
import { abortableDelay } from '../utils/backoff';
import { runWaitsOf } from './run-waits';

/**
 * Sleeps durably inside a workflow: the wake-up time (`ms` from now, by the database's clock) is recorded at the
 * workflow's next step position, so a workflow re-executed after a crash, a retry or a wake-up sleeps only what is
 * left. A sleep of a second or more suspends the workflow: it becomes `WAITING`, keeps its deduplication key, holds
 * no slot (it counts towards no `concurrency`, `workerConcurrency` or partition limit), and is claimed again through
 * its queue when the time comes; the body then runs again from the start, its recorded steps returning at once, and
 * goes on after the `sleep`. A shorter sleep waits in the process. Inside a step, it is a plain (not durable) delay.
 * A start-to-close `timeoutMs` counts the time asleep.
 *
 * @param ms how long to sleep, in milliseconds (0 or more)
 * @throws DedupQueueError outside a running workflow
 * @throws InvalidArgumentError when `ms` is not a finite number of 0 or more
 */
export const sleep = insideWorkflowFunction('sleep', async (ms: number): Promise<void> => {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new InvalidArgumentError('ms', `must be a finite number of milliseconds, 0 or more (got ${String(ms)})`);
  }
  const frame = executionFrames.getStore();
  if (!frame)
    throw new DedupQueueError('sleep() is only available while a workflow runs (inside a @Workflow() method)');
  const waits = runWaitsOf(frame.execution);
  if (frame.inStep || !waits) return abortableDelay(ms, frame.execution.context.signal);
  return waits.sleep(ms);
});
