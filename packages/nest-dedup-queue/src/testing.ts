/**
 * `nest-dedup-queue/testing`: internals that the repository's own suites drive directly (the migration runner,
 * the executor store, the schedule clock). Not part of the public API: no semver promise, may change in any
 * release. Applications import from `nest-dedup-queue`.
 */
export { QueueDatabase } from './database/connection/queue-database';
export { runMigrations } from './database/migrations/migration.runner';
export { MIGRATIONS } from './database/migrations';
export type { Migration } from './database/migrations';
export { ExecutorStore } from './database/executors/executor.store';
export { HistoryPartitions } from './database/sweeps/history-partitions';
export { SCHEDULE_CLOCK } from './scheduling/schedule.clock';
export type { ScheduleClock } from './scheduling/schedule.clock';
export { TickCalculator } from './scheduling/tick.calculator';
export { WorkflowClaimer } from './database/workflows/claim/workflow-claimer';
export type { AttachedClaim, ClaimResult } from './database/workflows/claim/workflow-claimer';
export type { ClaimRequest, ClaimedWorkflow } from './database/workflows/claim/claimed-rows';
export type { WorkflowOutcome } from './database/workflows/finish/workflow-outcomes.store';
export { OutcomeWriter } from './scheduler/outcome.writer';
export { StrandedDuplicates } from './database/sweeps/stranded-duplicates';
export { WorkflowVersionsMonitor } from './scheduler/workflow-versions.monitor';
export { workflowStreamStore } from './database/streams/workflow-stream.store';
