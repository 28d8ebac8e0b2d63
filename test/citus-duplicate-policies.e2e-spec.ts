/**
 * The policy table of docs/deduplication.md on a Citus cluster (`distribution: 'citus'`): every duplicate policy
 * against a queued, running, waiting and windowed holder gives what it gives on one server
 * (test/fixtures/duplicate-policy-table.ts).
 */
import { describePolicyTable } from './fixtures/duplicate-policy-table';
import { startCitusCluster } from './support/citus-cluster';
import { testPool } from './support/database';
import { describeWithTools } from './support/system-tools';

describeWithTools(['postgres-15', 'citus'], 'Citus: every duplicate policy against every holder', () => {
  describePolicyTable(async () => {
    const cluster = await startCitusCluster();
    const pool = testPool(cluster.url);
    return { url: cluster.url, distribution: 'citus', pool, stop: () => cluster.stop() };
  });
});
