import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { type ExecutionFrame, executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunction } from '../execution/inside-workflow-function';

/**
 * Changes a running workflow's code safely, at one point of its body: resolves `true` for a run that reaches this
 * point with the patch deployed (a marker is recorded at the workflow's next position, and a re-execution finds it
 * there), and `false` for a run that recorded something else at that position before the patch existed (an old run,
 * which must go on with the old code). The position is left to that old record, so the old branch replays it.
 *
 * ```ts
 * if (await patched('charge-with-tax')) await this.chargeWithTax(order);
 * else await this.charge(order);
 * ```
 *
 * Once no run that lacks the patch is left (`queueService.listVersions()`, or a query), replace `patched` with
 * `deprecatePatch` and remove the old branch; once no run that has the marker is left, remove the call. See
 * docs/changing-workflows.md.
 *
 * @param patchId names the change; the marker is recorded as the step `patch <patchId>`
 * @throws DedupQueueError outside a running workflow, or inside a step
 * @throws InvalidArgumentError when `patchId` is not a non-empty string
 */
export const patched = insideWorkflowFunction('patched', async (patchId: string): Promise<boolean> => {
  return frameFor('patched', patchId).execution.patch(patchId);
});

/**
 * The second life of a patch: resolves `true` and records nothing; a run that recorded the patch's marker at this
 * position (a run started while `patched(patchId)` was in the code) passes over it, so that its next operations
 * replay where they were recorded. Use it in place of `patched(patchId)` once every run without the patch finished,
 * keeping only the new branch; remove it once every run with the marker finished.
 *
 * @throws DedupQueueError outside a running workflow, or inside a step
 * @throws InvalidArgumentError when `patchId` is not a non-empty string
 */
export const deprecatePatch = insideWorkflowFunction('deprecatePatch', async (patchId: string): Promise<true> => {
  return Promise.resolve(frameFor('deprecatePatch', patchId).execution.deprecatePatch(patchId));
});

function frameFor(name: string, patchId: unknown): ExecutionFrame {
  if (typeof patchId !== 'string' || patchId === '') {
    throw new InvalidArgumentError('patchId', 'must be a non-empty string');
  }
  const frame = executionFrames.getStore();
  if (!frame)
    throw new DedupQueueError(`${name}() is only available while a workflow runs (inside a @Workflow() method)`);
  if (frame.inStep) throw new DedupQueueError(`${name}() cannot be called inside a step: call it in the workflow body`);
  return frame;
}
