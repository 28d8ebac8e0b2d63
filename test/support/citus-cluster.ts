import { startPostgresServer, StopMode, TestPostgresServer } from './postgres-server';

/**
 * A Citus cluster of one test file's own: a coordinator and workers (two by default), each a
 * {@link TestPostgresServer} from the Debian PostgreSQL 15 binaries with the Citus extension in its `postgres`
 * database. Like every test server, its files and processes go away when the test process ends in any way; `stop()`
 * does it at once.
 */
export interface CitusCluster {
  /** The coordinator's `postgres://postgres@127.0.0.1:<port>/postgres`, where the application connects. */
  readonly url: string;
  readonly coordinator: TestPostgresServer;
  readonly workers: readonly TestPostgresServer[];
  readonly workerUrls: readonly string[];
  /** Stops worker `index` (`pg_ctl stop -m <mode>`, default `immediate`, as a crashed node); it stays registered. */
  stopWorker(index: number, mode?: StopMode): Promise<void>;
  /** Starts the stopped worker `index` again on its port. */
  startWorker(index: number): Promise<void>;
  /** Index in `workers` of the node holding the shard of distributed table `table` where its column is `value`. */
  workerIndexFor(table: string, value: string): Promise<number>;
  /** Stops every node and deletes its files. Idempotent. */
  stop(): Promise<void>;
}

export interface CitusClusterOptions {
  /** How many worker nodes (default 2). */
  workers?: number;
  /** Libraries every node preloads besides Citus (e.g. `pg_stat_statements`, for a benchmark's statement counts). */
  preload?: string[];
  /** Server settings for every node over the defaults below (a benchmark's, e.g. from `CITUS_NODE_SETTINGS`). */
  settings?: Record<string, string>;
}

const WORKERS = 2;

/**
 * Small nodes: five engineers' test runs share two cores. Connections at PostgreSQL's default: a file's modules
 * (their pools and listeners on every node) and Citus's connections between the nodes took more than 50 on the
 * coordinator (citus-shards, "too many clients", in CI).
 */
const NODE_SETTINGS: Record<string, string> = {
  shared_preload_libraries: "'citus'",
  shared_buffers: '16MB',
  max_connections: '100',
};

/**
 * Starts a coordinator and `options.workers` workers (default 2) on free loopback ports, creates the Citus extension
 * on each, registers the coordinator (`citus_set_coordinator_host`) and the workers (`citus_add_node`). Needs the
 * `postgres-15` and `citus` system tools (test/support/system-tools.ts).
 */
export async function startCitusCluster(options: CitusClusterOptions = {}): Promise<CitusCluster> {
  const started = await Promise.allSettled(
    Array.from({ length: 1 + (options.workers ?? WORKERS) }, () =>
      startPostgresServer({
        binaries: 'debian',
        settings: {
          ...NODE_SETTINGS,
          ...options.settings,
          shared_preload_libraries: `'${['citus', ...(options.preload ?? [])].join(',')}'`,
        },
      }),
    ),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = () => Promise.all(nodes.map((node) => node.dispose())).then(() => undefined);
  try {
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(nodes.map((node) => node.query('CREATE EXTENSION citus')));
    const [coordinator, ...workers] = nodes;
    await coordinator.query('SELECT citus_set_coordinator_host($1, $2)', ['127.0.0.1', coordinator.port]);
    for (const worker of workers) {
      await coordinator.query('SELECT citus_add_node($1, $2)', ['127.0.0.1', worker.port]);
    }
    return {
      url: coordinator.url,
      coordinator,
      workers,
      workerUrls: workers.map((worker) => worker.url),
      stopWorker: (index, mode = 'immediate') => workers[index].stop(mode),
      startWorker: (index) => workers[index].start(),
      async workerIndexFor(table, value) {
        const [placement] = await coordinator.query<{ nodeport: number }>(
          `SELECT nodeport FROM pg_dist_shard_placement
           WHERE shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)`,
          [table, value],
        );
        return workers.findIndex((worker) => worker.port === placement.nodeport);
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
