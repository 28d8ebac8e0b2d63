/**
 * A `queue-next` follow-up takes its key in the transaction in which its holder ends, on one server: the race of
 * test/fixtures/hand-over-race.ts.
 */
import { databaseUrl, testPool } from './support/database';
import { describeHandOverRace } from './fixtures/hand-over-race';

describe('the hand-over of a key to its follow-up', () => {
  describeHandOverRace(async () => {
    const pool = testPool();
    return { options: { connection: { url: databaseUrl() } }, pool, stop: () => pool.end() };
  });
});
