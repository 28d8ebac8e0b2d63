/**
 * A `queue-next` follow-up takes its key in the transaction in which its holder ends, on a Citus cluster
 * (`distribution: 'citus'`), where the ending statements look up a waiting follow-up before the hand-over: the race of
 * test/fixtures/hand-over-race.ts.
 */
import { startCitusCluster } from './support/citus-cluster';
import { testPool } from './support/database';
import { describeHandOverRace } from './fixtures/hand-over-race';
import { describeWithTools } from './support/system-tools';

describeWithTools(['postgres-15', 'citus'], 'Citus: the hand-over of a key to its follow-up', () => {
  describeHandOverRace(async () => {
    const cluster = await startCitusCluster();
    const pool = testPool(cluster.url);
    return {
      options: { connection: { url: cluster.url }, distribution: 'citus' },
      pool,
      stop: async () => {
        await pool.end();
        await cluster.stop();
      },
    };
  });
});
