/**
 * The policy table of docs/deduplication.md on one server (test/fixtures/duplicate-policy-table.ts).
 */
import { describePolicyTable } from './fixtures/duplicate-policy-table';
import { databaseUrl, testPool } from './support/database';

describe('every duplicate policy against every holder', () => {
  describePolicyTable(async () => ({ url: databaseUrl(), pool: testPool() }));
});
