import { handOverFunctionSql } from '../workflows/finish/workflow-finish.sql';
import type { Migration } from './migration.interface';

/**
 * The whole record (1.1.0).
 *
 * - `hand_over_keys`: the function with which a statement that ends workflows hands their freed keys to the
 *   `queue-next` follow-ups waiting for them, in its own transaction (see `handOverFunctionSql`).
 * - `workflow_queue_by_parent`, `workflow_history_by_parent`: the children of a workflow, in any queue, for
 *   `list({ parentWorkflowId })`, the dashboard's filter and `cancel(id, { cancelChildren: true })`, which walks
 *   finished children too (their own children may run). Partial: only children are indexed.
 * - `event_waits`: the workflows suspended in a `getEvent` (WAITING, holding no slot), by the event they wait for:
 *   keyed by the queue and ID of the workflow that will set it (its `setEvent` makes them due) and the waiter's;
 *   `waiter_created_at` lets retention delete a day's registrations with the day, as `workflow_events`.
 *
 * Backward compatible with 1.0: a new function, which the previous release never calls (its ending statements hand
 * keys over in a CTE, and its heartbeat repairs what they miss, as before), new indexes, and a new table.
 */
export const wholeRecord: Migration = {
  version: 20,
  name: 'the-whole-record',
  up: (schema) => `
    ${handOverFunctionSql(schema)}
    CREATE INDEX workflow_queue_by_parent ON ${schema}.workflow_queue (parent_workflow_id)
      WHERE parent_workflow_id IS NOT NULL;
    CREATE INDEX workflow_history_by_parent ON ${schema}.workflow_history (parent_workflow_id)
      WHERE parent_workflow_id IS NOT NULL;
    CREATE TABLE ${schema}.event_waits (
      queue_name        text NOT NULL,
      workflow_id       text NOT NULL,
      key               text NOT NULL,
      waiter_queue      text NOT NULL,
      waiter_id         text NOT NULL,
      waiter_created_at timestamptz NOT NULL,
      PRIMARY KEY (queue_name, workflow_id, key, waiter_queue, waiter_id)
    );
    CREATE INDEX event_waits_waiter_created_at ON ${schema}.event_waits (waiter_created_at);
  `,
};
