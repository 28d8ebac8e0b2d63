/** One versioned change to the module's schema. Versions start at 1 and never change once released. */
export interface Migration {
  version: number;
  name: string;
  /** The SQL to run, given the quoted schema name. Runs in one transaction with its bookkeeping row. */
  up(schemaSql: string): string;
}
