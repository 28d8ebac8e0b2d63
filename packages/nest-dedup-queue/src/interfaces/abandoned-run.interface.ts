/**
 * The body of a cancelled or timed-out workflow that still runs in this process after its slot was freed (it
 * ignores `workflowContext().signal`). Its outcome is ignored. See `QueueService.abandonedRuns()`.
 */
export interface AbandonedRunInfo {
  workflowId: string;
  queueName: string;
  workflowName: string;
  /** Why its slot was freed. */
  reason: 'cancelled' | 'timed-out';
  /** When its slot was freed. */
  abandonedAt: Date;
  /** How long it has been running since then. */
  abandonedForMs: number;
}
