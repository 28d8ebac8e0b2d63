export * from './dedup-queue-options.interface';
export * from './enqueue-options.interface';
export * from './list-workflows-options.interface';
export * from './queue-options.interface';
export * from './workflow-handle.interface';
export * from './workflow-options.interface';
export * from './workflow-status.interface';
