/** A `@Workflow()` method, as passed to `enqueue` by reference. */
export type WorkflowFunction = (...args: never[]) => unknown;
