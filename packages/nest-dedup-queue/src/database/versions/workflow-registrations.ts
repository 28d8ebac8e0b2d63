/** A name and version a process runs: a workflow's own, or one of its aliases (`@Workflow({ aliases })`). */
export interface WorkflowRegistration {
  name: string;
  version: number;
}

/** The largest version `@Workflow({ version })` and `EnqueueOptions.version` take (a Postgres `integer`). */
export const MAX_WORKFLOW_VERSION = 2_147_483_647;

/**
 * The key of a name and version in a claim, `<version>:<name>`, as `CLAIM_KEY_SQL` makes it of a row: a worker
 * claims the rows whose key is one of its process's. One definition of each side, next to each other.
 */
export function claimKey(name: string, version: number): string {
  return `${version}:${name}`;
}

/** `claimKey` of a row of the active table. */
export const CLAIM_KEY_SQL = `(workflow_version::text || ':' || workflow_name)`;
