import { handOverFunctionSql } from '../workflow-finish.sql';
import type { Migration } from './migration.interface';

/**
 * The whole record (1.1.0). `hand_over_keys`: the function with which a statement that ends workflows hands their
 * freed keys to the `queue-next` follow-ups waiting for them, in its own transaction (see `handOverFunctionSql`).
 *
 * Backward compatible with 1.0: a new function, which the previous release never calls (its ending statements hand
 * keys over in a CTE, and its heartbeat repairs what they miss, as before).
 */
export const wholeRecord: Migration = {
  version: 20,
  name: 'the-whole-record',
  up: (schema) => handOverFunctionSql(schema),
};
