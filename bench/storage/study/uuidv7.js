'use strict';
// Time-ordered workflow IDs (UUID version 7, RFC 9562): 48 bits of Unix milliseconds, then a 12-bit counter that
// keeps IDs of one millisecond in order (method 1), then random bits. An index on such IDs is appended at its right
// edge instead of being written all over.
const { randomBytes } = require('node:crypto');

let lastMs = 0;
let counter = 0;

function uuidv7() {
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = randomBytes(2).readUInt16BE(0) & 0x3ff;
  } else {
    counter += 1;
    if (counter > 0xfff) {
      lastMs += 1;
      counter = 0;
    }
    ms = lastMs;
  }
  const bytes = randomBytes(16);
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = 0x70 | (counter >> 8);
  bytes[7] = counter & 0xff;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The same in SQL, for seeding: a version-7 UUID for the time `ts` (text), as `uuidv7_at(ts)`. */
const UUIDV7_SQL = `
  CREATE OR REPLACE FUNCTION public.uuidv7_at(ts timestamptz) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_byte(set_byte(overlay(uuid_send(gen_random_uuid())
             PLACING substring(int8send(floor(extract(epoch FROM ts) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
           6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 8, 128 | (get_byte(uuid_send(gen_random_uuid()), 8) & 63)),
           'hex')::uuid::text
  $$;`;

module.exports = { uuidv7, UUIDV7_SQL };
