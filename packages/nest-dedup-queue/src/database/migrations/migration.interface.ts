/** One versioned change to the module's schema. Versions start at 1 and never change once released. */
export interface Migration {
  version: number;
  name: string;
  /**
   * The SQL to run, given the quoted schema name. Runs in one transaction with its bookkeeping row. A list runs
   * command by command: a migration that changes a table Citus may have distributed gives one command per item,
   * since Citus propagates some DDL with the whole query string, which then holds several commands and fails.
   */
  up(schemaSql: string): string | readonly string[];
  /**
   * Set only in a new major, on a migration that older releases cannot run against: once it is applied, processes
   * of an older release refuse to start instead of running against a newer schema (every process must be upgraded).
   */
  breaking?: boolean;
}
