import type { WorkflowOptions } from './workflow-options.interface';

/** What `@Workflow()` records on the decorated method, and discovery reads back. Internal: not exported. */
export interface WorkflowMetadata {
  name: string;
  options: WorkflowOptions;
}
