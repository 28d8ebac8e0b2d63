import type { Query } from './queue-database';

/**
 * Takes the schema's advisory lock for the rest of the transaction: migrations and the creation of partitions run
 * under it, one process at a time. NOTE: transaction-scoped, so that it also holds behind a transaction pooler.
 */
export async function lockSchema(query: Query, schema: string): Promise<void> {
  await query('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', ['nest-dedup-queue', schema]);
}
