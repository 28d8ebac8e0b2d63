'use strict';
// W1 dedup storm: `calls` enqueue calls over `keys` keys (calls/keys each, shuffled), 16 concurrent producers in
// one process, no workers. Reports calls/s; checks that exactly `keys` were accepted, by the callers' outcomes
// and by what the system stored.
const { runRole } = require('../lib/proc');
const { shuffle } = require('../lib/stats');
const { Transactions } = require('../lib/usage');

/** How many distinct keys the first `made` calls of the storm's (deterministic) sequence use. */
function distinctKeys(calls, keys, made) {
  const sequence = [];
  for (let i = 0; i < calls; i++) sequence.push(i % keys);
  shuffle(sequence);
  return new Set(sequence.slice(0, made)).size;
}

module.exports = async function dedupStorm(system, ctx, config) {
  await system.adapter.reset(ctx);
  const { calls, keys, producers, maxSeconds } = config.w1;
  const transactions = ctx.databaseUrl
    ? new Transactions({ adminUrl: ctx.adminUrl, databaseUrl: ctx.databaseUrl })
    : null;
  if (transactions) await transactions.start();
  const result = await runRole(
    { module: system.module, ctx, role: 'storm', args: { calls, keys, producers, maxSeconds } },
    (maxSeconds + 120) * 1000,
  );
  const xacts = transactions ? await transactions.stop() : null;
  const stored = await system.adapter.stored(ctx);
  const problems = [];
  const capped = result.calls < calls;
  // With a shuffled sequence cut short, the keys called are the distinct ones among the first `result.calls`.
  const expected = capped ? distinctKeys(calls, keys, result.calls) : keys;
  if (result.errors) problems.push(`${result.errors} enqueue calls failed (${result.firstError})`);
  if (result.accepted !== expected) problems.push(`${result.accepted} calls reported accepted, expected ${expected}`);
  if (stored !== expected) problems.push(`${stored} jobs stored, expected ${expected}`);
  return {
    perSecond: result.perSecond,
    calls: result.calls,
    capped,
    accepted: result.accepted,
    stored,
    elapsedMs: result.elapsedNs / 1e6,
    // The producer process's CPU per call, and the database's transactions per call (the producer's boot included).
    producerUsPerCall: (result.cpuSeconds * 1e6) / result.calls,
    commitsPerCall: xacts ? xacts.transactions / result.calls : null,
    ok: problems.length === 0,
    problems,
  };
};
