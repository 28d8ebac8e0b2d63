import type { Migration } from './migration.interface';

/**
 * The W3C `traceparent` of the span that enqueued a workflow, so that its runs (in any process, after any
 * recovery) join the enqueuer's trace. NULL when nothing was traced.
 */
export const traceContext: Migration = {
  version: 8,
  name: 'trace-context',
  up: (schema) => `
    ALTER TABLE ${schema}.workflows ADD COLUMN trace_context text;
  `,
};
