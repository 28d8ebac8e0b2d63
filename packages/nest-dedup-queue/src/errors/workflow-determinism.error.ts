import { DedupQueueError } from './dedup-queue.error';

/**
 * A re-executed workflow (a retry, a recovery, a wake-up, a resume) called a different operation than the one
 * recorded at the same position: its code changed without a patch, or it is not deterministic. The run stops there
 * instead of mixing two histories, and the workflow is dead-lettered with this error, keeping its deduplication key,
 * its recorded steps and its children: deploy code that calls the recorded operation there (the old version, or a
 * `patched()` branch) and `resume` it, or `fork` it from that position. See docs/changing-workflows.md.
 */
export class WorkflowDeterminismError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    /** The position (0, 1, 2, ... in call order) where the operations differ. */
    readonly stepIndex: number,
    /** The operation recorded there (a step's name, `sleep`, `recv`, `setEvent <key>`, `patch <id>`, ...). */
    readonly recordedStep: string,
    /** The operation the code called there now. */
    readonly calledStep: string,
  ) {
    super(
      `Workflow "${workflowId}" called step "${calledStep}" as step #${stepIndex}, but "${recordedStep}" was recorded ` +
        `there: its code changed under it (or is not deterministic). It is dead-lettered, keeping its key; deploy ` +
        `code that calls "${recordedStep}" there (the old version, or a patched() branch) and resume it, or fork it ` +
        `(docs/changing-workflows.md)`,
    );
  }
}
