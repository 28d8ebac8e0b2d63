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

/**
 * The database's time where a workflow starts running or a step's checkpoint is written: after any lock wait on one
 * server (`clock_timestamp()`); the statement's `now()` on Citus, which refuses `clock_timestamp()` in a modification.
 * A rate limit's window ends at the same time, so that it counts the starts by the clock that stamped them.
 */
export function startTimeSql(citus: boolean): string {
  return citus ? 'now()' : 'clock_timestamp()';
}

/**
 * `not_before = ...,` for a change of start: at `runAt`, or `delayMs` from now by the database's clock, or unchanged
 * when neither is given; its parameters numbered from `first`. On one server one statement text decides by CASE; on
 * Citus (where a CASE in a modification may not hold `now()`) the form is chosen here.
 */
export function changedStartSql(
  citus: boolean,
  change: { runAt: Date | null; delayMs: number | null },
  first: number,
): { sql: string; params: unknown[] } {
  if (!citus) {
    return {
      sql: `not_before = CASE WHEN $${first}::timestamptz IS NULL AND $${first + 1}::float8 IS NULL THEN not_before
        ELSE coalesce($${first}::timestamptz, now() + $${first + 1}::float8 * interval '1 millisecond') END,`,
      params: [change.runAt, change.delayMs],
    };
  }
  if (change.runAt) return { sql: `not_before = $${first}::timestamptz,`, params: [change.runAt] };
  if (typeof change.delayMs === 'number') {
    return { sql: `not_before = ${nowPlusMsSql(false, `$${first}::float8`)},`, params: [change.delayMs] };
  }
  return { sql: '', params: [] };
}
