import { DedupQueueConfigurationError } from '../../errors/dedup-queue-configuration.error';
import type { Query, QueueDatabase } from '../connection/queue-database';
import { lockSchema } from '../connection/schema-lock';
import {
  CHECKPOINT_DISTRIBUTION_ARGUMENT,
  CHECKPOINT_FUNCTION_ARGUMENTS,
  checkpointFunctionName,
  createCheckpointFunctionSql,
} from '../steps/checkpoint-function.sql';

/** The column every per-workflow table is distributed by: every rule (keys, limits, order) is per queue. */
export const DISTRIBUTION_COLUMN = 'queue_name';

/**
 * Where each table of the schema lives on a Citus cluster (`forRoot({ distribution: 'citus' })`), named once.
 *
 * - `distributed`: the per-workflow tables, hash-distributed by `queue_name` and co-located with the first one, so
 *   that a queue's active rows, history and steps sit on one node and every statement keyed by its queue runs there
 *   whole. Partitioned tables are distributed with their partitions; partitions created later (the daily ones of
 *   `HistoryPartitions`) come out distributed. A table added by a later migration that holds rows of workflows goes
 *   here (its unique keys must include `queue_name`).
 * - `reference`: small tables that hot statements read next to a queue's rows (the queue's pause flag in the
 *   claim): a copy on every node. Writing one needs every node.
 * - `coordinator`: tables whose rows stay on the coordinator, written often or by everyone whatever the queue
 *   (leases and heartbeats, schedules and their tick cursors, the migrations' bookkeeping), so that a worker node
 *   that is down stops only the queues it holds. They are Citus local tables (`citus_add_local_table_to_metadata`):
 *   an instance connected to a worker node reads and writes them too, each statement routed to the coordinator.
 *   They follow the rules of Citus tables: no `now()` (or another function that is not IMMUTABLE) in an upsert's
 *   `DO UPDATE SET`; take the time from the inserted row (`EXCLUDED.col`).
 */
export const CITUS_TABLES = {
  distributed: [
    'workflow_queue',
    'workflow_history',
    'steps',
    'workflow_events',
    'workflow_messages',
    'workflow_streams',
    'event_waits',
    'queue_starts',
    'executor_leases',
    'workflow_ready',
  ],
  reference: ['queues'],
  coordinator: ['executors', 'registered_workflows', 'schedules', 'schema_migrations', 'input_limits'],
} as const;

/** Refuses `distribution: 'citus'` on a database without the extension, before anything is written. */
export async function assertCitusInstalled(database: QueueDatabase): Promise<void> {
  const rows = await database.query<{ version: string }>(
    `SELECT extversion AS version FROM pg_extension WHERE extname = 'citus'`,
    [],
    { idempotent: true },
  );
  if (rows.length === 0) {
    throw new DedupQueueConfigurationError(
      `DedupQueueModule: \`distribution: 'citus'\` needs the Citus extension, which the database at ` +
        `${database.settings.endpoint.label} does not have. ` +
        `Connect to a Citus coordinator (CREATE EXTENSION citus, with worker nodes added by citus_add_node), or ` +
        `leave \`distribution\` out on a single PostgreSQL server`,
    );
  }
}

/**
 * The Citus group of the node `database` connects to when it is a worker node of a Citus cluster (whatever
 * `distribution` says); undefined on the coordinator, on a node not yet added to a cluster (its group is 0) and on a
 * database without Citus.
 */
export async function citusWorkerGroup(database: QueueDatabase): Promise<number | undefined> {
  const [catalog] = await database.query<{ present: boolean }>(
    `SELECT to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL AS present`,
    [],
    { idempotent: true },
  );
  if (!catalog.present) return undefined;
  const [node] = await database.query<{ group_id: number }>(`SELECT groupid AS group_id FROM pg_dist_local_group`, [], {
    idempotent: true,
  });
  return node && node.group_id !== 0 ? node.group_id : undefined;
}

/**
 * Refuses an instance on a worker node (group `group`) without `distribution: 'citus'`, before anything is written:
 * the schema there is a Citus one, which only the Citus forms of the statements use.
 */
export function assertCitusOnWorkerNode(database: QueueDatabase, group: number): void {
  if (database.citus) return;
  throw new DedupQueueConfigurationError(
    `DedupQueueModule: the database at ${database.settings.endpoint.label} is a worker node of a Citus cluster ` +
      `(group ${group}): set \`distribution: 'citus'\` (see docs/citus.md, "Worker nodes")`,
  );
}

/**
 * What an instance on a worker node still lacks of the schema a coordinator instance distributes (every table of
 * `CITUS_TABLES` a Citus table, the checkpoint function distributed): the missing names, none when it is complete.
 * A worker node runs no DDL, so it waits for a coordinator instance to do this.
 */
export async function undistributedObjects(database: QueueDatabase): Promise<string[]> {
  const tables = [...CITUS_TABLES.distributed, ...CITUS_TABLES.reference, ...CITUS_TABLES.coordinator];
  const [row] = await database.query<{ missing: string[] }>(
    `SELECT coalesce(array_agg(t.name ORDER BY t.ord), '{}') AS missing
     FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
     WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition AS p
                       WHERE p.logicalrelid = to_regclass(quote_ident($2) || '.' || quote_ident(t.name)))`,
    [tables, database.schema],
    { idempotent: true },
  );
  const [fn] = await database.query<{ distributed: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object
                    WHERE classid = 'pg_catalog.pg_proc'::regclass AND objid = to_regprocedure($1)
                      AND distribution_argument_index IS NOT NULL) AS distributed`,
    [`${checkpointFunctionName(database.schemaSql)}(${CHECKPOINT_FUNCTION_ARGUMENTS})`],
    { idempotent: true },
  );
  return fn.distributed ? row.missing : [...row.missing, 'record_checkpoint()'];
}

/**
 * Distributes the schema's tables as `CITUS_TABLES` says (the coordinator's made Citus local tables, in place with
 * their rows: a schema of 1.1, whose were plain tables, converts at its first boot), under the schema's advisory
 * lock, in one transaction, then
 * (in a second one: Citus refuses it after the tables' parallel copy) creates the checkpoint function
 * (`checkpoint-function.sql.ts`) distributed by its queue, co-located with the tables.
 * Tables and the function already distributed are left alone, so a boot after the first does nothing; tables of a
 * schema that ran on one server are distributed in place with their rows (Citus copies them to the shards; the
 * coordinator's local copy is then emptied). Returns the tables (and the function) this call distributed.
 */
export async function distributeTables(database: QueueDatabase): Promise<string[]> {
  const done = await database.transaction(async (query: Query) => {
    await lockSchema(query, database.schema);
    const done: string[] = [];
    const [anchor] = CITUS_TABLES.distributed;
    for (const table of CITUS_TABLES.distributed) {
      const name = `${database.schemaSql}.${table}`;
      if (await isDistributed(query, name)) continue;
      await query(`SELECT create_distributed_table($1, $2, colocate_with => $3)`, [
        name,
        DISTRIBUTION_COLUMN,
        table === anchor ? 'default' : `${database.schemaSql}.${anchor}`,
      ]);
      await emptyLocalCopy(query, name);
      done.push(table);
    }
    for (const table of CITUS_TABLES.reference) {
      const name = `${database.schemaSql}.${table}`;
      if (await isDistributed(query, name)) continue;
      await query(`SELECT create_reference_table($1)`, [name]);
      await emptyLocalCopy(query, name);
      done.push(table);
    }
    for (const table of CITUS_TABLES.coordinator) {
      const name = `${database.schemaSql}.${table}`;
      if (await isDistributed(query, name)) continue;
      await query(`SELECT citus_add_local_table_to_metadata($1)`, [name]);
      done.push(table);
    }
    return done;
  });
  const functionDistributed = await database.transaction(async (query: Query) => {
    await lockSchema(query, database.schema);
    return distributeCheckpointFunction(query, database.schemaSql);
  });
  return functionDistributed ? [...done, 'record_checkpoint()'] : done;
}

/**
 * Creates the checkpoint function and distributes it by its queue argument, co-located with the active table, so that
 * Citus sends each call to the queue's node; false if it was already distributed.
 */
async function distributeCheckpointFunction(query: Query, schemaSql: string): Promise<boolean> {
  const signature = `${checkpointFunctionName(schemaSql)}(${CHECKPOINT_FUNCTION_ARGUMENTS})`;
  const distributed = await query(
    `SELECT 1 FROM pg_catalog.pg_dist_object
     WHERE classid = 'pg_catalog.pg_proc'::regclass AND objid = to_regprocedure($1)
       AND distribution_argument_index IS NOT NULL`,
    [signature],
  );
  if (distributed.length > 0) return false;
  await query(createCheckpointFunctionSql(schemaSql));
  await query(`REVOKE ALL ON FUNCTION ${signature} FROM PUBLIC`);
  await query(`SELECT create_distributed_function($1, $2, colocate_with => $3)`, [
    signature,
    CHECKPOINT_DISTRIBUTION_ARGUMENT,
    `${schemaSql}.${CITUS_TABLES.distributed[0]}`,
  ]);
  return true;
}

async function isDistributed(query: Query, table: string): Promise<boolean> {
  const rows = await query(`SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass`, [table]);
  return rows.length > 0;
}

/** Once Citus copied a table's rows to its shards, the coordinator's own copy is dead weight. */
async function emptyLocalCopy(query: Query, table: string): Promise<void> {
  await query(`SELECT truncate_local_data_after_distributing_table($1)`, [table]);
}
