import type { Migration } from './migration.interface';

/**
 * Executor leases by queue (1.2.0, issue 36). On Citus a claim takes its executor's lease row `FOR KEY SHARE` so that
 * recovery cannot free a claim still being made; until now that row was the executor's in `executors`, on the
 * coordinator, so every claim went to the coordinator first, wherever its queue was. `executor_leases` holds a
 * row per executor and stored queue name it claims from, with its own expiry renewed by the heartbeat; on Citus it is
 * distributed by `queue_name` with the active table, so the claim locks it on the queue's node and the recovery of a
 * queue deletes its expired rows there (see `CitusExecutorLeases`). On one server nothing reads or writes it: a
 * claim there is one statement that checks `executors` itself.
 *
 * Backward compatible with 1.1: a 1.1 process writes no lease rows, so its runs are told from orphans by its row in
 * `executors`, which recovery still reads (see docs/upgrading.md).
 */
export const executorLeases: Migration = {
  version: 24,
  name: 'executor-leases',
  up: (schema) => [
    `CREATE TABLE ${schema}.executor_leases (
       queue_name  text NOT NULL,
       executor_id text NOT NULL,
       expires_at  timestamptz NOT NULL,
       PRIMARY KEY (queue_name, executor_id)
     )`,
  ],
};
