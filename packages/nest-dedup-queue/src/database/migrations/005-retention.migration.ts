import type { Migration } from './migration.interface';

export const retention: Migration = {
  version: 5,
  name: 'retention',
  up: (schema) => `
    CREATE INDEX workflows_completed_at ON ${schema}.workflows (completed_at) WHERE completed_at IS NOT NULL;
  `,
};
