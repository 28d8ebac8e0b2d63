'use strict';
/*
 * The workflows of bench/isolation/measure.js: each body twice, isolated (`@Workflow({ isolate: 'thread' })`, run in
 * a worker thread, which loads this file) and not (on the main thread). Declared at the top level and exported, as
 * isolation asks.
 */
const { LIBRARY_DIST } = require('../lib/config');

const from = (id) => require(require.resolve(id, { paths: [LIBRARY_DIST] }));
from('reflect-metadata');
const common = from('@nestjs/common');
const lib = require(LIBRARY_DIST);

function busyFor(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // CPU-bound: never yields to the event loop
  }
}

class IsolationBenchTasks {
  async spin(ms) {
    busyFor(ms);
  }

  async spinHere(ms) {
    busyFor(ms);
  }

  /** Spins `ms` (so that the bodies of a round take one thread each), then says how much heap its thread uses. */
  async heap(ms) {
    busyFor(ms);
    global.gc?.();
    return process.memoryUsage().heapUsed;
  }

  async noop() {}

  async noopHere() {}
}
common.Injectable()(IsolationBenchTasks);
for (const [method, options] of [
  ['spin', { isolate: 'thread' }],
  ['spinHere', {}],
  ['heap', { isolate: 'thread' }],
  ['noop', { isolate: 'thread' }],
  ['noopHere', {}],
]) {
  const descriptor = Object.getOwnPropertyDescriptor(IsolationBenchTasks.prototype, method);
  lib.Workflow(options)(IsolationBenchTasks.prototype, method, descriptor);
}

module.exports = { IsolationBenchTasks };
