import { DataSource } from 'typeorm';
import type { DedupQueueConfig } from '../dedup-queue.config';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { DedupQueueModuleOptions } from '../interfaces/dedup-queue-options.interface';
import { describeError } from '../utils/describe-error';
import {
  assertCitusInstalled,
  assertCitusOnWorkerNode,
  citusWorkerGroup,
  distributeTables,
  undistributedObjects,
} from './migrations/citus-distribution';
import { HistoryPartitions } from './sweeps/history-partitions';
import { storeInputLimits } from './input-limits.store';
import { missingMigrations, runMigrations } from './migrations/migration.runner';
import { MIGRATIONS } from './migrations';
import { QueueDatabase } from './connection/queue-database';
import { ErrorPhase, isConnectionFailure, isServerError } from './connection/sql-errors';
import { ModuleLogger } from '../utils/module-logger';

const logger = new ModuleLogger('DedupQueueModule');

/**
 * Opens (or adopts) the DataSource and migrates the module's schema before anything else uses it. While Postgres
 * cannot be reached, or refuses connections for now (see `isConnectionFailure`), it tries again `retryAttempts`
 * times, `retryDelay` apart, logging one line per attempt; then fails with an error that names the module, the host,
 * port, database and user, and what to check. A refusal that trying again does not cure fails at once.
 */
export async function createQueueDatabase(
  options: DedupQueueModuleOptions,
  config: DedupQueueConfig,
): Promise<QueueDatabase> {
  if (options.dataSource && options.dataSource.options.type !== 'postgres') {
    throw new DedupQueueConfigurationError(
      `DedupQueueModule: the dataSource is of type "${options.dataSource.options.type}"; nest-dedup-queue needs Postgres`,
    );
  }
  const endpoint = config.endpoint;
  for (let attempt = 1; ; attempt++) {
    const database = new QueueDatabase(
      options.dataSource ?? ownDataSource(options, config),
      config.schema,
      !options.dataSource,
      {
        endpoint,
        preparedStatements: !config.transactionPooler,
        connectTimeoutMs: config.connectTimeoutMs,
        distribution: config.distribution,
        inputLimits: config.inputLimits,
      },
    );
    let phase: ErrorPhase = 'connect';
    try {
      if (!database.dataSource.isInitialized) await database.dataSource.initialize();
      phase = 'statement';
      database.guardPoolConnections();
      if (database.citus) await assertCitusInstalled(database);
      database.citusWorkerGroup = await citusWorkerGroup(database);
      if (database.citusWorkerGroup !== undefined) {
        assertCitusOnWorkerNode(database, database.citusWorkerGroup);
        await assertMigratedByCoordinator(database);
        await storeInputLimits(database);
        return database;
      }
      const applied = await runMigrations(database, MIGRATIONS);
      if (applied.length > 0)
        logger.log(`Migrated schema "${config.schema}" to version ${applied[applied.length - 1]}`);
      if (database.citus) {
        const distributed = await distributeTables(database);
        if (distributed.length > 0)
          logger.log(`Distributed schema "${config.schema}" on Citus: ${distributed.join(', ')}`);
      }
      await storeInputLimits(database);
      await new HistoryPartitions(database).extend();
      return database;
    } catch (error) {
      await database.close().catch(() => undefined);
      if (error instanceof SchemaNotReadyYet) {
        if (attempt > config.retryAttempts) throw error.asConfigurationError(attempt);
        logger.warn(`${error.message}. Waiting (${attempt}/${config.retryAttempts}) ${config.retryDelayMs} ms...`);
        await new Promise((resolve) => setTimeout(resolve, config.retryDelayMs));
        continue;
      }
      if (!isConnectionFailure(error, phase)) throw bootError(error, config);
      if (attempt > config.retryAttempts) {
        throw new DatabaseUnavailableError(
          `DedupQueueModule: cannot reach Postgres at ${endpoint.label} as user "${endpoint.user}" ` +
            `(${describeError(error)}) after ${attempt} attempt(s). Check that the server runs and accepts TCP ` +
            `connections at ${endpoint.host}:${endpoint.port}, the connection options (url or host, port, database), ` +
            `and the network in between; connectTimeoutMs is ${config.connectTimeoutMs} ms`,
          error,
        );
      }
      logger.error(
        `Unable to connect to Postgres at ${endpoint.label} (${describeError(error)}). ` +
          `Retrying (${attempt}/${config.retryAttempts}) in ${config.retryDelayMs} ms...`,
      );
      await new Promise((resolve) => setTimeout(resolve, config.retryDelayMs));
    }
  }
}

/**
 * What an instance on a worker node of a Citus cluster waits for: a worker node runs no DDL, so the schema is
 * migrated and distributed by an instance on the coordinator, which may be booting at the same time.
 */
class SchemaNotReadyYet extends Error {
  constructor(
    private readonly database: QueueDatabase,
    missing: string,
  ) {
    super(
      `Schema "${database.schema}" on the Citus worker node at ${database.settings.endpoint.label} lacks ${missing}: ` +
        `an instance on the coordinator migrates and distributes it`,
    );
  }

  asConfigurationError(attempts: number): DedupQueueConfigurationError {
    return new DedupQueueConfigurationError(
      `DedupQueueModule: ${this.message}, and none did after ${attempts} attempt(s). Start one instance with ` +
        `\`distribution: 'citus'\` on the coordinator first, of this release or a newer one (see docs/citus.md, ` +
        `"Worker nodes")`,
    );
  }
}

/**
 * On a worker node: the schema must be migrated to this release's newest migration (a newer compatible one is used
 * with a warning) and distributed; both are the work of a coordinator instance, never done here.
 */
async function assertMigratedByCoordinator(database: QueueDatabase): Promise<void> {
  const [table] = await database.query<{ present: boolean }>(
    `SELECT to_regclass($1) IS NOT NULL AS present`,
    [`${database.schemaSql}.schema_migrations`],
    { idempotent: true },
  );
  if (!table.present) throw new SchemaNotReadyYet(database, 'its migrations (it is not readable from this node)');
  const missing = await missingMigrations(database, MIGRATIONS);
  if (missing.length > 0) throw new SchemaNotReadyYet(database, `migration ${missing.join(', ')}`);
  const undistributed = await undistributedObjects(database);
  if (undistributed.length > 0) throw new SchemaNotReadyYet(database, `Citus tables ${undistributed.join(', ')}`);
}

function ownDataSource(options: DedupQueueModuleOptions, config: DedupQueueConfig): DataSource {
  const connection = options.connection ?? {};
  return new DataSource({
    applicationName: 'nest-dedup-queue',
    ...connection,
    connectTimeoutMS: config.connectTimeoutMs,
    extra: { keepAlive: true, ...(connection.extra as Record<string, unknown> | undefined) },
    poolErrorHandler: () => undefined,
    type: 'postgres',
    entities: [],
    synchronize: false,
    migrationsRun: false,
  });
}

/** A refusal that retrying will not fix (credentials, a missing database), told with the endpoint. */
function bootError(error: unknown, config: DedupQueueConfig): unknown {
  if (!isServerError(error)) return error;
  const { endpoint } = config;
  return new DedupQueueConfigurationError(
    `DedupQueueModule: Postgres at ${endpoint.label} refused user "${endpoint.user}": ${describeError(error)}. ` +
      `Check the user, password and database in the connection options, the user's privileges, and pg_hba.conf`,
  );
}
