/** One versioned change to the module's schema. Versions start at 1 and never change once released. */
export interface Migration {
  version: number;
  name: string;
  /** The SQL to run, given the quoted schema name. Runs in one transaction with its bookkeeping row. */
  up(schemaSql: string): string;
  /**
   * Set only in a new major, on a migration that older releases cannot run against: once it is applied, processes
   * of an older release refuse to start instead of running against a newer schema (every process must be upgraded).
   */
  breaking?: boolean;
}
