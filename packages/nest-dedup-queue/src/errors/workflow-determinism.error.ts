import { DedupQueueError } from './dedup-queue.error';

/**
 * A recovered or retried workflow called a different step than the one recorded at the same position: its code
 * changed, or it is not deterministic. The workflow fails instead of mixing two histories.
 */
export class WorkflowDeterminismError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly stepIndex: number,
    readonly recordedStep: string,
    readonly calledStep: string,
  ) {
    super(
      `Workflow "${workflowId}" called step "${calledStep}" as step #${stepIndex}, but "${recordedStep}" was recorded ` +
        `there; workflow code must call the same steps in the same order on every run (see "Determinism" in docs/durable-workflows.md)`,
    );
  }
}
