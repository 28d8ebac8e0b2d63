'use strict';
// W5 memory: the worker's peak RSS (VmHWM) during W2 is recorded by the W2 drain itself. Here: the same worker
// started on a backlog of `backlog` jobs, run for at most `maxSeconds` (or until drained), with its RSS sampled
// every 200 ms. "Flat" means its peak stays within 25% (and 40 MiB) of its W2 peak: no buffering of the backlog.
const { drain } = require('./w2-drain');

module.exports = async function backlogMemory(system, ctx, config) {
  const result = await drain(system, ctx, config, {
    jobs: config.w5.backlog,
    timeoutMs: config.w5.maxSeconds * 1000,
    sampleRss: true,
  });
  const samples = result.rssSamplesMiB.filter(Number.isFinite);
  await system.adapter.reset(ctx); // leave no 100,000-job backlog behind
  return {
    peakRssMiB: result.peakRssMiB,
    rssFirstMiB: samples[0] ?? null,
    rssLastMiB: samples[samples.length - 1] ?? null,
    processed: result.progress,
    drained: result.perSecond !== null,
    perSecond: result.perSecond,
    ok: result.ok || (result.problems.length === 1 && /not drained/.test(result.problems[0])),
    problems: result.problems,
  };
};
