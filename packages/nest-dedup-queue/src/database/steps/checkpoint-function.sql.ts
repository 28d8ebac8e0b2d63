import { ownsRowSql } from './owned-row.sql';
import { STEP_COLUMNS } from './step-columns';
import { PINNED_SEARCH_PATH } from '../migrations/019-enqueue-from-sql-secured.migration';

/** The name of the checkpoint function in the schema (`"dedup_queue".record_checkpoint`). */
export function checkpointFunctionName(schemaSql: string): string {
  return `${schemaSql}.record_checkpoint`;
}

/** Its argument types, as `to_regprocedure` and `create_distributed_function` name it. */
export const CHECKPOINT_FUNCTION_ARGUMENTS = 'text, text, text, integer, integer, text, json, json, double precision';

/** The argument the function is distributed by (its queue), co-located with the active table. */
export const CHECKPOINT_DISTRIBUTION_ARGUMENT = 'p_queue_name';

/**
 * On Citus, a step's checkpoint as one function call: `record_checkpoint(queue, workflow, executor, run, index, name,
 * output, error, duration in ms)` locks the workflow's active row `FOR SHARE` if it is PENDING under `executor` in run
 * `run`, and then inserts the checkpoint (`ON CONFLICT DO NOTHING`: one recorded already at this index counts), with
 * the row's creation time; false if the row is not owned. Distributed by its queue and co-located with the tables
 * (`create_distributed_function`), Citus sends the whole call to the queue's node, where it runs in one transaction:
 * the coordinator plans and forwards one statement instead of a transaction of two (see docs/citus.md). Only the
 * module's role (its owner) may call it (`REVOKE … FROM PUBLIC`, as for the schema's other functions), with the
 * pinned `search_path` of those.
 */
export function createCheckpointFunctionSql(schemaSql: string): string {
  return `CREATE OR REPLACE FUNCTION ${checkpointFunctionName(schemaSql)}(
      ${CHECKPOINT_DISTRIBUTION_ARGUMENT} text, p_workflow_id text, p_executor_id text, p_attempt integer,
      p_step_index integer, p_step_name text, p_output json, p_error json, p_duration_ms double precision)
    RETURNS boolean LANGUAGE plpgsql ${PINNED_SEARCH_PATH} AS $checkpoint$
    DECLARE
      created timestamptz;
    BEGIN
      SELECT created_at INTO created FROM ${schemaSql}.workflow_queue
        WHERE ${ownsRowSql({
          queue: CHECKPOINT_DISTRIBUTION_ARGUMENT,
          workflow: 'p_workflow_id',
          executor: 'p_executor_id',
          attempt: 'p_attempt',
        })}
        FOR SHARE;
      IF NOT FOUND THEN
        RETURN false;
      END IF;
      INSERT INTO ${schemaSql}.steps (${STEP_COLUMNS})
        VALUES (p_workflow_id, p_step_index, p_step_name, p_output, p_error,
                now() - p_duration_ms * interval '1 millisecond', now(), ${CHECKPOINT_DISTRIBUTION_ARGUMENT}, created)
        ON CONFLICT DO NOTHING;
      RETURN true;
    END
    $checkpoint$`;
}
