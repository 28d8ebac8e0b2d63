import { resolve } from 'node:path';
import type { Pool } from 'pg';
import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { dropSchema, testPool, uniqueSchema } from './support/database';

describe('an application without prom-client, @nestjs/terminus, @opentelemetry/api and the database libraries of `db`', () => {
  const schema = uniqueSchema('nopeers');
  let pool: Pool;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    await killFixtures();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('loads the package, boots, runs workflows, and says what to install for health and metrics', async () => {
    const child = spawnFixture('child-no-peers.ts', 'no-peers', {
      SCHEMA: schema,
      NODE_OPTIONS: `--require ${resolve(__dirname, 'fixtures/hide-optional-peers.js')}`,
    });
    const report = await child.message('result');
    expect(report).toEqual({
      type: 'result',
      loadable: [],
      result: 42,
      health:
        'DedupQueueConfigurationError: DedupQueueHealthIndicator needs @nestjs/terminus: npm install @nestjs/terminus',
      metrics:
        'DedupQueueConfigurationError: DedupQueueModule: `metrics` needs the prom-client package: npm install prom-client',
    });
    expect(await child.waitForExit()).toEqual({ code: 0, signal: null });
    const rows = await pool.query(`SELECT status, trace_context FROM "${schema}".workflows`);
    expect(rows.rows).toEqual([{ status: 'SUCCESS', trace_context: null }]);
  });
});
