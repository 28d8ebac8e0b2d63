/** Options of the `@Workflow()` decorator. */
export interface WorkflowOptions {
  /** The registered name. Default `ClassName.methodName`. Must be unique in the application. */
  name?: string;
}
