'use strict';
// W4 growth: the W2 drain again, on a table that already holds `finished` finished jobs, inserted in one
// INSERT ... SELECT generate_series in the shape the system keeps finished jobs (adapter.seedFinished). The result
// is the throughput ratio to the same system's W2 (medians of both).
const { drain } = require('./w2-drain');

async function seed(system, ctx, config) {
  await system.adapter.reset(ctx);
  const t0 = Date.now();
  await system.adapter.seedFinished(ctx, config.w4.finished);
  return { seedMs: Date.now() - t0 };
}

async function growthDrain(system, ctx, config) {
  // No reset: the finished rows stay (and the previous repetition's 20,000 join them, as they would in production).
  return drain(system, ctx, config, { jobs: config.w2.jobs, reset: false });
}

module.exports = { seed, growthDrain };
