import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import type { DedupQueueConfig } from '../dedup-queue.config';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { DedupQueueModuleOptions } from '../interfaces/dedup-queue-options.interface';
import { runMigrations } from './migration.runner';
import { MIGRATIONS } from './migrations';
import { QueueDatabase } from './queue-database';

/** Opens (or adopts) the DataSource and migrates the module's schema before anything else uses it. */
export async function createQueueDatabase(
  options: DedupQueueModuleOptions,
  config: DedupQueueConfig,
): Promise<QueueDatabase> {
  const owned = !options.dataSource;
  const dataSource =
    options.dataSource ??
    new DataSource({
      applicationName: 'nest-dedup-queue',
      ...options.connection,
      type: 'postgres',
      entities: [],
      synchronize: false,
      migrationsRun: false,
    });
  if (dataSource.options.type !== 'postgres') {
    throw new DedupQueueConfigurationError(
      `DedupQueueModule: the dataSource is of type "${dataSource.options.type}"; nest-dedup-queue needs Postgres`,
    );
  }
  if (!dataSource.isInitialized) {
    await dataSource.initialize();
  }
  const database = new QueueDatabase(dataSource, config.schema, owned);
  try {
    const applied = await runMigrations(database, MIGRATIONS);
    if (applied.length > 0) {
      new Logger('DedupQueueModule').log(`Migrated schema "${config.schema}" to version ${applied[applied.length - 1]}`);
    }
  } catch (error) {
    await database.close();
    throw error;
  }
  return database;
}
