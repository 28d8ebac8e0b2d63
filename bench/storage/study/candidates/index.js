'use strict';
// The study's candidates, in the order of its tables: the module as it is, the layouts, and graphile-worker.
const { UUIDV7_SQL } = require('../uuidv7');
const { enqueueAll, drainAll } = require('../driver');
const { libraryCandidate } = require('./library');

/** A layout prototyped in plain SQL (its DDL, seed, statements), enqueued and drained by the study's driver. */
function prototype(definition) {
  return {
    id: definition.id,
    label: definition.label,
    driven: true,
    /** Its statements' calls (`enqueueBatch`, `worker`), for diagnostics that drive them (explain.js). */
    parts: definition,
    async install(db, seed) {
      await db.query(UUIDV7_SQL);
      await db.query(definition.ddl);
      if (seed > 0) await db.query(definition.seedSql, [seed]);
      await db.query('VACUUM ANALYZE');
    },
    enqueue: (args) => enqueueAll(args, definition.enqueueBatch, definition.planCacheMode),
    async drain(args) {
      const started = performance.now();
      const result = await drainAll(args, definition.worker(), definition.planCacheMode);
      return { ...result, seconds: (performance.now() - started) / 1000 };
    },
  };
}

function drivenLibrary() {
  const p0 = libraryCandidate('P0');
  return {
    ...p0,
    driven: true,
    enqueue: (args) => enqueueAll(args, p0.enqueueBatch),
    async drain(args) {
      const started = performance.now();
      const result = await drainAll(args, p0.worker());
      return { ...result, seconds: (performance.now() - started) / 1000 };
    },
  };
}

const CANDIDATES = {
  'l0-library': () => libraryCandidate('1.0'),
  'a-trimmed': () => libraryCandidate('A'),
  'l0-no-running': () => libraryCandidate('R'),
  'p0-library-sql': drivenLibrary,
  'b-ready-apart': () => prototype(require('./ready-apart')),
  'b-generated': () => prototype(require('./ready-apart-generated')),
  'b-floor': () => prototype(require('./floors').bFloor()),
  'b-floor-no-history': () => prototype(require('./floors').bFloorNoHistory()),
  'd-ready-in-place': () => prototype(require('./ready-in-place')),
  'c-written-once': () => prototype(require('./written-once').writtenOnce()),
  'c-advisory': () => prototype(require('./written-once').writtenOnce({ advisory: true })),
  'graphile-worker': () => require('./graphile'),
};

/**
 * What `--storage` measures unless STUDY_CANDIDATES says otherwise (measured apart: c-advisory, one of C's levers; the
 * floors, diagnostics of B; D, rejected for its claims' pass over running rows, which `STUDY_HELD` shows; B with
 * generated columns, a refinement of B measured beside it; the module without its running indexes, what B saves by
 * doing without them).
 */
const APART = ['c-advisory', 'b-generated', 'b-floor', 'b-floor-no-history', 'd-ready-in-place', 'l0-no-running'];
const DEFAULT_CANDIDATES = Object.keys(CANDIDATES).filter((id) => !APART.includes(id));

module.exports = { CANDIDATES, DEFAULT_CANDIDATES, UUIDV7_SQL };
