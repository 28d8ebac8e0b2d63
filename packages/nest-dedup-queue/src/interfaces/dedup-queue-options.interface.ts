import type { DataSource, DataSourceOptions } from 'typeorm';
import type { IsolationOptions } from './isolation-options.interface';
import type { InputLimits } from './input-limits.interface';
import type { DedupQueueMetricsOptions } from './metrics-options.interface';
import type { QueueOptions } from './queue-options.interface';

/** TypeORM Postgres connection options, without `type` (always `'postgres'`). At least `url`, or host/port/... */
export type DedupQueueConnectionOptions = Omit<
  Extract<DataSourceOptions, { type: 'postgres' }>,
  'type' | 'entities' | 'synchronize' | 'migrations' | 'migrationsRun'
>;

/** Options of `DedupQueueModule.forRoot()` (and the result of `forRootAsync`'s `useFactory`). */
export interface DedupQueueModuleOptions {
  /**
   * How to reach Postgres when the module should open its own connection pool,
   * e.g. `{ url: 'postgres://user@127.0.0.1:5432/app' }`. Give either this or `dataSource`. A `url` that is
   * undefined or empty (an unset `DATABASE_URL`), with no `host`, is a `DedupQueueConfigurationError` at boot.
   */
  connection?: DedupQueueConnectionOptions;
  /**
   * An existing TypeORM `DataSource` for Postgres (for example the one `@nestjs/typeorm` provides), so the
   * queue shares the application's pool. The module initializes it if needed and never destroys it.
   */
  dataSource?: DataSource;
  /** The Postgres schema that holds the module's tables. Default `'dedup_queue'`. */
  schema?: string;
  /**
   * Queues this application enqueues into (and, when `worker` is on, drains), next to those that feature modules
   * declare with `DedupQueueModule.registerQueue()`. Each queue is declared once, here or there. Default none.
   */
  queues?: QueueOptions[];
  /**
   * Whether this process runs workflows: `true` (every declared queue), `false` (it only enqueues and looks up), or
   * `{ queues: [...] }` to drain only some of the declared queues. Default `true`.
   */
  worker?: boolean | { queues: string[] };
  /** This process's identity, recorded on the workflows it claims. Default: generated per process. */
  executorId?: string;
  /**
   * How often a worker looks for work when no notification arrived, in milliseconds. New work normally starts
   * within milliseconds through LISTEN/NOTIFY; polling is the fallback. Default 1000.
   */
  pollIntervalMs?: number;
  /**
   * How long shutdown waits for running workflows before it closes the connections, in milliseconds.
   * Default 30000.
   */
  shutdownGraceMs?: number;
  /**
   * How long an executor may go without a heartbeat before the others consider it dead and recover its PENDING
   * workflows, in milliseconds. A live peer finishes a crashed process's work within about
   * `leaseMs + heartbeatIntervalMs`; an event-loop stall longer than about `leaseMs - heartbeatIntervalMs` makes a
   * healthy process lose its lease (its workflows then run elsewhere; it notices and stops them). Default 6000.
   */
  leaseMs?: number;
  /** How often a worker renews its lease and looks for expired leases and timeouts, in ms. Default `leaseMs / 3`. */
  heartbeatIntervalMs?: number;
  /**
   * How long to wait for a new connection to be established, in milliseconds. Default: the URL's
   * `connect_timeout` (seconds) if it has one, else 10000.
   */
  connectTimeoutMs?: number;
  /**
   * How many times boot tries again when Postgres cannot be reached (as `@nestjs/typeorm`'s option of the same
   * name). Default 9.
   */
  retryAttempts?: number;
  /** Milliseconds between boot attempts. Default 3000. */
  retryDelay?: number;
  /**
   * `'transaction'` when the connection goes through a transaction-pooling proxy (PgBouncer `pool_mode =
   * transaction`, Supavisor, RDS Proxy): the module then uses no named prepared statements and no session state,
   * and takes wake-ups only from `listen: { url }` (without it, workers poll every `pollIntervalMs`).
   * Default `'none'`.
   */
  pooler?: 'transaction' | 'none';
  /**
   * Where LISTEN/NOTIFY wake-ups come from. `true` (default): a pooled connection; at boot a NOTIFY self-test checks
   * that notifications arrive, and workers fall back to polling with a warning if they do not. `{ url }`: a
   * connection of its own to this URL, straight to the server past any pooler. `false`: poll only.
   */
  listen?: boolean | { url: string };
  /**
   * How many times a workflow may be recovered after its process died before it is dead-lettered as
   * `MAX_RECOVERY_ATTEMPTS_EXCEEDED` (a poison input that kills its process). Default 10.
   */
  maxRecoveryAttempts?: number;
  /**
   * How long finished workflows (SUCCESS, ERROR, CANCELLED) and their steps are kept, in milliseconds; workers
   * delete older ones in the background. `null` keeps them forever. Dead-lettered workflows are always kept.
   * Default 7 days.
   */
  retentionMs?: number | null;
  /**
   * Prometheus metrics through `prom-client` (an optional peer: install it). `true` registers them on prom-client's
   * default registry; `{ registry }` on the given one. Queue depths and the oldest wait are read from Postgres at
   * scrape time (cluster-wide); counters and histograms count what this process did. See docs/operations.md, "Metrics".
   * Default: no metrics.
   */
  metrics?: boolean | DedupQueueMetricsOptions;
  /**
   * Names of workflows this process may enqueue without having them (their `@Workflow()` class runs in other
   * processes), e.g. `['Transcoder.transcode']`: `enqueue(queue, 'Transcoder.transcode', args)` then works here, and
   * any other name that no local `@Workflow()` has is still an `UnknownWorkflowError`. A listed name that is also a
   * local workflow is that local workflow (so producer and worker processes may share one configuration). The
   * process that runs a workflow applies its own `@Workflow()` options (retries, backoff, dead-letter limit).
   * Default none.
   */
  externalWorkflows?: string[];
  /**
   * Where the module's tables live. `'single'` (default): plain PostgreSQL tables. `'citus'`: the connection is a
   * Citus cluster's coordinator; at boot, after the migrations, the per-workflow tables become distributed by queue
   * (co-located) and the queue settings a reference table, so that each hot statement runs on the one node that
   * holds its queue (see docs/citus.md). A database without the `citus` extension refuses it at boot. Booting a
   * plain schema with `'citus'` distributes its tables in place, keeping their rows.
   */
  distribution?: 'single' | 'citus';
  /**
   * Citus settings (only with `distribution: 'citus'`). An instance LISTENs on every node of the cluster (the
   * coordinator and each active primary worker node of `pg_dist_node`), with its own connection settings and the
   * node's host and port. `nodeAddresses` maps a node's `'name:port'`, as `pg_dist_node` names it, to the
   * `'host:port'` this process reaches it at, where the two differ (a container network, a proxy); a node not
   * listed is reached as named. Default: no mapping.
   */
  citus?: { nodeAddresses?: Record<string, string> };
  /**
   * The worker threads that run the bodies of `@Workflow({ isolate: 'thread' })` in this process: how many, their
   * memory caps, when they are recycled (see `IsolationOptions` and docs/isolation.md). Default: as many threads as
   * `os.availableParallelism()`, no caps, never recycled, ended after a minute idle.
   */
  isolation?: IsolationOptions;
  /**
   * Limits on what callers store: the size and nesting depth of arguments, messages, event values and results
   * (keys are at most 255 characters, a fixed limit). Enforced by the JavaScript API and by
   * `<schema>.enqueue_workflow(...)` in SQL (which reads the limits the last process to boot wrote to the schema:
   * give every process the same). Default `{ maxValueBytes: 4194304, maxDepth: 64 }`.
   */
  inputLimits?: InputLimits;
}
