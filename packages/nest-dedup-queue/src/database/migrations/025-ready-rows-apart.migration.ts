import { enqueueWorkflowFunction } from './022-workflow-versions.migration';
import type { Migration } from './migration.interface';

/** The indexes of the active table whose key or predicate a claim changes, which this migration replaces. */
const INDEXES_A_CLAIM_MOVED = [
  'workflow_queue_ready',
  'workflow_queue_ready_partition',
  'workflow_queue_running',
  'workflow_queue_running_partition',
  'workflow_queue_waiting',
  'workflow_queue_deadline',
];

/**
 * Ready rows apart, a HOT claim (1.2.0, issue 32). A claim used to move three index entries of the active row: the
 * ready and running indexes named its status, the running one its executor. Now no index of the active table names
 * a value a claim changes, so a claim is a HOT update (its new row version on its page, no index entry):
 *
 * - `workflow_ready`: a row per ENQUEUED workflow (queue, priority, `seq`, workflow ID, partition key), written and
 *   deleted with every move into and out of ENQUEUED (see `ready-rows.sql.ts`); a claim picks its workflows there
 *   and deletes their ready rows. On Citus distributed by `queue_name` with the active table. The upgrade writes one
 *   for every ENQUEUED row.
 * - Stored generated columns in place of the status in index predicates (an update that leaves their values as they
 *   were stays HOT): `counted_running` (`counted`, which the claim of a queue with global limits sets, while
 *   PENDING) for the running counts of `concurrency` and `partitionConcurrency`; `wake_at` (`not_before` while
 *   WAITING) for the sleepers' wake-ups; `live_deadline_at` (`deadline_at` while the workflow can run) for the
 *   deadline sweep. The upgrade counts every running row (a limit set later counts what runs then).
 * - The active table at `fillfactor` 50, so that a claimed version fits on its page (new pages; the rewrite that
 *   adds the generated columns applies it to the table's pages).
 * - Recovery finds a dead executor's runs by scanning its queues' rows once, when its lease expires (see
 *   `ExecutorStore.recoverExpired`): no index on the executor.
 * - `enqueue_workflow` writes the ready row of what it inserts.
 *
 * Breaking: a process of an older release would enqueue rows without ready rows, which no claim of this release
 * takes, and claim by indexes that are gone; once this is applied, older processes refuse to start (stop them all
 * before the upgrade; docs/upgrading.md).
 */
export const readyRowsApart: Migration = {
  version: 25,
  name: 'ready-rows-apart',
  breaking: true,
  up: (schema) => [
    `CREATE TABLE ${schema}.workflow_ready (
       queue_name    text NOT NULL,
       priority      integer NOT NULL,
       seq           bigint NOT NULL,
       workflow_id   text NOT NULL,
       partition_key text
     )`,
    `CREATE INDEX workflow_ready_order ON ${schema}.workflow_ready (queue_name, priority, seq, workflow_id)`,
    `CREATE INDEX workflow_ready_partition ON ${schema}.workflow_ready (queue_name, partition_key, priority, seq)
       WHERE partition_key IS NOT NULL`,
    `ALTER TABLE ${schema}.workflow_ready SET (
       autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
       autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0
     )`,
    `INSERT INTO ${schema}.workflow_ready (queue_name, priority, seq, workflow_id, partition_key)
       SELECT queue_name, priority, seq, workflow_id, partition_key FROM ${schema}.workflow_queue
       WHERE status = 'ENQUEUED'`,
    ...INDEXES_A_CLAIM_MOVED.map((index) => `DROP INDEX ${schema}.${index}`),
    `ALTER TABLE ${schema}.workflow_queue ADD COLUMN counted boolean NOT NULL DEFAULT false`,
    `UPDATE ${schema}.workflow_queue SET counted = true WHERE status = 'PENDING'`,
    `ALTER TABLE ${schema}.workflow_queue ADD COLUMN counted_running boolean
       GENERATED ALWAYS AS (counted AND status = 'PENDING') STORED`,
    `ALTER TABLE ${schema}.workflow_queue ADD COLUMN wake_at timestamptz
       GENERATED ALWAYS AS (CASE WHEN status = 'WAITING' THEN not_before END) STORED`,
    `ALTER TABLE ${schema}.workflow_queue ADD COLUMN live_deadline_at timestamptz
       GENERATED ALWAYS AS (CASE WHEN status IN ('ENQUEUED', 'PENDING', 'WAITING') THEN deadline_at END) STORED`,
    `ALTER TABLE ${schema}.workflow_queue SET (fillfactor = 50)`,
    `CREATE INDEX workflow_queue_running ON ${schema}.workflow_queue (queue_name, partition_key) WHERE counted_running`,
    `CREATE INDEX workflow_queue_waiting ON ${schema}.workflow_queue (queue_name, wake_at) WHERE wake_at IS NOT NULL`,
    `CREATE INDEX workflow_queue_deadline ON ${schema}.workflow_queue (queue_name, live_deadline_at)
       WHERE live_deadline_at IS NOT NULL`,
    enqueueWorkflowFunction(schema, true),
  ],
};
