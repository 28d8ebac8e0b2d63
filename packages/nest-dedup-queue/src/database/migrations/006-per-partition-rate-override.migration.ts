import type { Migration } from './migration.interface';

export const perPartitionRateOverride: Migration = {
  version: 6,
  name: 'per-partition-rate-override',
  up: (schema) => `ALTER TABLE ${schema}.queues ADD COLUMN rate_per_partition boolean;`,
};
