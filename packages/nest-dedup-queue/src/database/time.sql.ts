/**
 * The database's time plus `ms` milliseconds, where `ms` is an SQL expression that may read columns. On one server:
 * `now() + ms * interval '1 millisecond'`. On Citus (`citus`), a modification of a distributed table may not call a
 * STABLE function with column references, nor a non-IMMUTABLE one inside CASE or COALESCE: there the coordinator
 * evaluates `extract(epoch FROM now())` (no column in it) to a constant, and `to_timestamp(constant + ms / 1000)` is
 * IMMUTABLE over the columns, so `ms` may be a CASE (NULL gives NULL).
 */
export function nowPlusMsSql(citus: boolean, ms: string): string {
  return citus
    ? `to_timestamp(extract(epoch FROM now())::float8 + (${ms}) / 1000.0)`
    : `now() + (${ms}) * interval '1 millisecond'`;
}

/** The database's time where a workflow starts running: after any lock wait on one server; the statement's on Citus. */
export function startTimeSql(citus: boolean): string {
  return citus ? 'now()' : 'clock_timestamp()';
}
