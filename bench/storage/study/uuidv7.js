'use strict';
// Time-ordered workflow IDs (UUID version 7, RFC 9562): the module's own generator since 1.1 (its built dist).
const path = require('node:path');
const { newWorkflowId: uuidv7 } = require(
  path.resolve(__dirname, '../../../packages/nest-dedup-queue/dist/utils/workflow-id'),
);

/** The same in SQL, for seeding: a version-7 UUID for the time `ts` (text), as `uuidv7_at(ts)`. */
const UUIDV7_SQL = `
  CREATE OR REPLACE FUNCTION public.uuidv7_at(ts timestamptz) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_byte(set_byte(overlay(uuid_send(gen_random_uuid())
             PLACING substring(int8send(floor(extract(epoch FROM ts) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
           6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 8, 128 | (get_byte(uuid_send(gen_random_uuid()), 8) & 63)),
           'hex')::uuid::text
  $$;`;

module.exports = { uuidv7, UUIDV7_SQL };
