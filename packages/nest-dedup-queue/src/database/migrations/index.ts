import { createWorkflows } from './001-create-workflows.migration';
import { durability } from './002-durability.migration';
import { flowControl } from './003-flow-control.migration';
import { duplicatePolicies } from './004-duplicate-policies.migration';
import { retention } from './005-retention.migration';
import { perPartitionRateOverride } from './006-per-partition-rate-override.migration';
import { autovacuum } from './007-autovacuum.migration';
import { traceContext } from './008-trace-context.migration';
import { schedules } from './009-schedules.migration';
import { dashboard } from './010-dashboard.migration';
import { followUpHandOver } from './011-follow-up-hand-over.migration';
import { dashboardIndexesWithoutPending } from './012-dashboard-indexes-without-pending.migration';
import { activeWorkApartFromHistory } from './013-active-work-apart-from-history.migration';
import { enqueueFromSql } from './014-enqueue-from-sql.migration';
import { childWorkflowsAndEvents } from './015-child-workflows-and-events.migration';
import { waitingAndMessages } from './016-waiting-and-messages.migration';
import { keysWithTheQueue } from './017-keys-with-the-queue.migration';
import { moreDuplicatePolicies } from './018-more-duplicate-policies.migration';
import { enqueueFromSqlSecured } from './019-enqueue-from-sql-secured.migration';
import { wholeRecord } from './020-the-whole-record.migration';
import { durableStreams } from './021-durable-streams.migration';
import { workflowVersions } from './022-workflow-versions.migration';
import { historyByIdOnly } from './023-history-by-id-only.migration';
import { executorLeases } from './024-executor-leases.migration';
import { readyRowsApart } from './025-ready-rows-apart.migration';
import type { Migration } from './migration.interface';

/** Every migration, in version order. Append new ones; never edit a released one. */
export const MIGRATIONS: readonly Migration[] = [
  createWorkflows,
  durability,
  flowControl,
  duplicatePolicies,
  retention,
  perPartitionRateOverride,
  autovacuum,
  traceContext,
  schedules,
  dashboard,
  followUpHandOver,
  dashboardIndexesWithoutPending,
  activeWorkApartFromHistory,
  enqueueFromSql,
  childWorkflowsAndEvents,
  waitingAndMessages,
  keysWithTheQueue,
  moreDuplicatePolicies,
  enqueueFromSqlSecured,
  wholeRecord,
  durableStreams,
  workflowVersions,
  historyByIdOnly,
  executorLeases,
  readyRowsApart,
];

export type { Migration } from './migration.interface';
