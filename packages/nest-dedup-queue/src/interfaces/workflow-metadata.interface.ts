import type { WorkflowOptions } from './workflow-options.interface';

/** What `@Workflow()` records on the decorated method, and discovery reads back. Internal: not exported. */
export interface WorkflowMetadata {
  name: string;
  options: WorkflowOptions;
  /** For an isolated workflow: the file (or `file:` URL) whose code applied the decorator, which its thread loads. */
  declaredIn?: string;
}
