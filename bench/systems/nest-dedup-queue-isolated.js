'use strict';
/*
 * The drained workflow of nest-dedup-queue with `@Workflow({ isolate: 'thread' })` (bench/isolation/measure.js, W2
 * isolated): the worker process's threads load this file, so it declares the class at its top level and exports it.
 * Its registered name is the plain adapter's (`BenchTasks.run`), so the same prefill feeds it. A body tells the
 * worker process's main thread that it ran through a BroadcastChannel; the main thread counts bodies there, as it
 * counts the plain adapter's.
 */
const { LIBRARY_DIST } = require('../lib/config');

const from = (id) => require(require.resolve(id, { paths: [LIBRARY_DIST] }));
from('reflect-metadata');
const common = from('@nestjs/common');
const lib = require(LIBRARY_DIST);

const JOBS_CHANNEL = 'nest-dedup-queue-bench-jobs';
const jobs = new BroadcastChannel(JOBS_CHANNEL);
jobs.unref();

class IsolatedBenchTasks {
  async run(payload) {
    jobs.postMessage(payload);
  }
}
common.Injectable()(IsolatedBenchTasks);
lib.Workflow({ name: 'BenchTasks.run', isolate: 'thread' })(
  IsolatedBenchTasks.prototype,
  'run',
  Object.getOwnPropertyDescriptor(IsolatedBenchTasks.prototype, 'run'),
);

/** Calls `onJob` in this thread for every body that ran in a worker thread; returns a function that stops it. */
function listenForJobs(onJob) {
  const channel = new BroadcastChannel(JOBS_CHANNEL);
  channel.onmessage = (event) => onJob(event.data);
  return () => channel.close();
}

module.exports = { IsolatedBenchTasks, listenForJobs };
