import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown by `writeStream` when the value would take the stream past its cap
 * (`forRoot({ inputLimits: { maxStreamValues, maxStreamBytes } })`): nothing was appended. Not recorded: a re-executed
 * body meets the same full stream again (unless the cap was raised). The stream stays open, so a value that fits the
 * bytes left can still be written, and `closeStream` still closes it.
 */
export class StreamLimitError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly key: string,
    /** Which cap the value would exceed. */
    readonly limit: 'maxStreamValues' | 'maxStreamBytes',
    /** The cap. */
    readonly max: number,
    /** What the stream holds already: values for `maxStreamValues`, bytes for `maxStreamBytes`. */
    readonly current: number,
  ) {
    super(
      limit === 'maxStreamValues'
        ? `Stream "${key}" of workflow "${workflowId}" holds ${current} values, its cap (inputLimits.maxStreamValues = ${max}): nothing was appended`
        : `Stream "${key}" of workflow "${workflowId}" holds ${current} bytes; this value would take it past its cap (inputLimits.maxStreamBytes = ${max}): nothing was appended`,
    );
  }
}
