import type { Migration } from './migration.interface';

/**
 * Every workflow row is updated a few times and its index entries churn; with Postgres's default (vacuum after 20%
 * of the table changed), a table of a million finished rows lets dead entries pile up in the claim indexes for a
 * long time. Vacuum after 1% (and at least 1000 rows), without throttling.
 */
export const autovacuum: Migration = {
  version: 7,
  name: 'autovacuum',
  up: (schema) => `
    ALTER TABLE ${schema}.workflows SET (
      autovacuum_vacuum_scale_factor = 0.01,
      autovacuum_vacuum_threshold = 1000,
      autovacuum_analyze_scale_factor = 0.02,
      autovacuum_vacuum_cost_delay = 0
    );
  `,
};
