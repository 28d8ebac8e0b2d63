'use strict';
// What a stretch of WAL holds, from pg_waldump: records, full-page images and bytes by resource manager and record
// type, and the index entries written per index (B-tree INSERT_LEAF / INSERT_POST and leaf-level splits, which carry
// the new entry), for the relations of one database.
const { spawn } = require('node:child_process');
const readline = require('node:readline');
const path = require('node:path');

const LINE = /^rmgr: (\S+)\s+len \(rec\/tot\):\s+(\d+)\/\s*(\d+), tx:\s+\d+, lsn: \S+, prev \S+, desc: (\S+)(.*)$/;
const BLOCK = /blkref #\d+: rel \d+\/(\d+)\/(\d+)(?: fork \w+)? blk \d+( FPW)?/g;

/**
 * Reads the WAL of `dataDir` from `startLsn` to `endLsn` and sums it. `databaseOid`: the database whose relations
 * count as the work's (records without a relation, such as commits, count when their transaction touched it).
 */
async function walSummary({ binDir, dataDir, startLsn, endLsn, databaseOid }) {
  const child = spawn(
    path.join(binDir, 'pg_waldump'),
    ['-p', path.join(dataDir, 'pg_wal'), '-s', startLsn, '-e', endLsn],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk.toString()));
  const byType = new Map();
  const byRelation = new Map();
  const total = { records: 0, fpi: 0, bytes: 0, otherDatabases: 0 };
  const lines = readline.createInterface({ input: child.stdout });
  for await (const line of lines) {
    const match = LINE.exec(line);
    if (!match) continue;
    const [, rmgr, , tot, type, rest] = match;
    const blocks = [...rest.matchAll(BLOCK)];
    if (blocks.length > 0 && blocks.every((b) => Number(b[1]) !== databaseOid)) {
      total.otherDatabases += 1;
      continue;
    }
    const fpi = blocks.filter((b) => b[3]).length;
    const key = `${rmgr} ${type}`;
    const entry = byType.get(key) ?? { records: 0, fpi: 0, bytes: 0 };
    entry.records += 1;
    entry.fpi += fpi;
    entry.bytes += Number(tot);
    byType.set(key, entry);
    total.records += 1;
    total.fpi += fpi;
    total.bytes += Number(tot);
    const relfilenode = blocks.length > 0 ? Number(blocks[0][2]) : null;
    if (relfilenode !== null) {
      const rel = byRelation.get(relfilenode) ?? { records: 0, fpi: 0, bytes: 0, entries: 0, types: {} };
      rel.records += 1;
      rel.fpi += fpi;
      rel.bytes += Number(tot);
      rel.types[key] = (rel.types[key] ?? 0) + 1;
      if (
        rmgr === 'Btree' &&
        (type === 'INSERT_LEAF' || type === 'INSERT_POST' || (/^SPLIT_/.test(type) && /level 0\b/.test(rest)))
      )
        rel.entries += 1;
      byRelation.set(relfilenode, rel);
    }
  }
  const code = await new Promise((resolve) => child.on('close', resolve));
  // NOTE: pg_waldump ends with an error at the end LSN when the last record is incomplete there; what it read counts.
  if (code !== 0 && total.records === 0) throw new Error(`pg_waldump failed (${code}): ${stderr.trim()}`);
  return { total, byType: Object.fromEntries(byType), byRelation };
}

module.exports = { walSummary };
