/** Metadata key under which `@Workflow()` stores its definition on the decorated method. */
export const WORKFLOW_METADATA = 'dedup-queue:workflow';

export const DEFAULT_SCHEMA = 'dedup_queue';
export const DEFAULT_WORKER_CONCURRENCY = 10;
export const DEFAULT_POLL_INTERVAL_MS = 1000;
export const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;
/**
 * The longest key (workflow ID, deduplication ID, partition key, topic, idempotency or event key) in characters:
 * what a cancel notification's payload and an index entry hold with room to spare, and what the module's own IDs
 * need (a schedule's triggered run is up to 251).
 */
export const MAX_KEY_LENGTH = 255;
/** The defaults of `forRoot({ inputLimits })`. */
export const DEFAULT_INPUT_LIMITS = {
  maxValueBytes: 4 * 1024 * 1024,
  maxDepth: 64,
  maxStreamValues: 100_000,
  maxStreamBytes: 16 * 1024 * 1024,
};
/** A live peer recovers a dead process's work within leaseMs + heartbeatIntervalMs (8 s). */
export const DEFAULT_LEASE_MS = 6_000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** Boot retries, as `@nestjs/typeorm` does them. */
export const DEFAULT_RETRY_ATTEMPTS = 9;
export const DEFAULT_RETRY_DELAY_MS = 3_000;
export const DEFAULT_MAX_RECOVERY_ATTEMPTS = 10;
/** A worker thread of isolated bodies idle this long ends. */
export const DEFAULT_THREAD_IDLE_MS = 60_000;
/** Metadata key under which `@Step()` stores its options on the decorated method. */
export const STEP_METADATA = 'dedup-queue:step';
export const DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;
/** Metadata key under which `@OnWorkflowEvent()` stores the events a method listens to. */
export const WORKFLOW_EVENT_METADATA = 'dedup-queue:workflow-event';
/** Metadata key under which `@Scheduled()` stores its cron and options on the decorated method. */
export const SCHEDULED_METADATA = 'dedup-queue:scheduled';

/** Class metadata: the queue names `@InjectQueue()` was used with on the class (its constructor or properties). */
export const INJECTED_QUEUES_METADATA = 'dedup-queue:injected-queues';

/**
 * Separates a sharded queue's name from its shard number in the name its rows are stored under (the unit separator,
 * U+001F, which a queue name may not contain: see `resolveConfig`), so that a stored name never collides with a
 * declared queue and always reads back as its queue.
 */
export const SHARD_SEPARATOR = '\u001f';
