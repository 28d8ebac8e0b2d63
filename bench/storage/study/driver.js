'use strict';
// The study's stand-in for the module's worker and enqueuer, for layouts prototyped in plain SQL: what the module does
// per job, in the statements a layout gives it. Enqueue: batches of 1,000 new workflows, each with a deduplication
// key. Drain: two lanes (the module writes two outcome statements at once), each claiming up to 32 due workflows,
// then recording their outcomes in one statement that also claims the next 32 (as the module attaches its next claim
// to an outcome write); a lane that finds nothing waits 2 ms and claims again. Statements are named (prepared), as
// the module sends its hot statements.
const { Pool } = require('pg');

const ENQUEUE_BATCH = 1000;
const LANES = 2;
const CLAIM_BATCH = 32;
/**
 * STUDY_HELD: workflows claimed before the drain and left PENDING (long runs, at the head of the queue), which every
 * claim of a layout whose ready index keeps running rows passes over (candidate D); the drain then ends the others.
 */
const HELD = Number(process.env.STUDY_HELD || 0);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function pool(url, max, planCacheMode) {
  const p = new Pool({
    connectionString: url,
    max,
    application_name: 'study-driver',
    ...(planCacheMode ? { options: `-c plan_cache_mode=${planCacheMode}` } : {}),
  });
  p.on('error', () => {});
  return p;
}

/**
 * Enqueues `jobs` workflows keyed `<keyPrefix><n>` through `insertBatch(client, keys, inputBytes)`; returns how many
 * were inserted.
 */
async function enqueueAll({ url, jobs, keyPrefix, inputBytes }, insertBatch, planCacheMode) {
  const p = pool(url, 1, planCacheMode);
  const client = await p.connect();
  let inserted = 0;
  try {
    for (let at = 0; at < jobs; at += ENQUEUE_BATCH) {
      const keys = Array.from({ length: Math.min(ENQUEUE_BATCH, jobs - at) }, (_, n) => `${keyPrefix}${at + n}`);
      inserted += await insertBatch(client, keys, inputBytes);
    }
  } finally {
    client.release();
  }
  return { inserted, close: () => p.end() };
}

/**
 * Drains `jobs` workflows: `claim(client, limit)` gives claimed workflows (`{ workflowId, attempt }`);
 * `finish(client, claimed, limit)` records their outcomes (SUCCESS, no output) and claims up to `limit` more, giving
 * `{ recorded, claimed }`. `setup(client)` runs first (the executor's lease row), then the claim of the `HELD`
 * workflows that stay PENDING. `planCacheMode`: the sessions' (the server's default when unset).
 */
async function drainAll({ url, jobs: all }, { setup, claim, finish }, planCacheMode) {
  const p = pool(url, LANES, planCacheMode);
  const first = await p.connect();
  await setup(first);
  const held = HELD > 0 ? (await claim(first, HELD)).length : 0;
  first.release();
  const jobs = all - held;
  let recorded = 0;
  let statements = 0;
  const lane = async () => {
    const client = await p.connect();
    try {
      let claimed = [];
      while (recorded < jobs) {
        if (claimed.length === 0) {
          statements++;
          claimed = await claim(client, CLAIM_BATCH);
          if (claimed.length === 0) {
            await sleep(2);
            continue;
          }
        }
        statements++;
        const result = await finish(client, claimed, CLAIM_BATCH);
        recorded += result.recorded;
        claimed = result.claimed;
      }
      if (claimed.length > 0) throw new Error(`claimed ${claimed.length} workflow(s) past the last job`);
    } finally {
      client.release();
    }
  };
  await Promise.all(Array.from({ length: LANES }, lane));
  return { recorded, statements, close: () => p.end() };
}

module.exports = { enqueueAll, drainAll, ENQUEUE_BATCH, LANES, CLAIM_BATCH, HELD };
