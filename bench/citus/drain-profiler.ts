/*
 * BENCH_CPU_PROFILE=<folder>: the worker process's CPU profile of each drain's measured span (from its first job to
 * its last outcome), written as `<folder>/<nn>-<schema>.cpuprofile` (nn: the drain's number in the run) (Chrome DevTools' format; `bench/citus/
 * profile-summary.js` sums it by function). Without the variable, a profiler that does nothing.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { join } from 'node:path';

export interface DrainProfiler {
  start(): void;
  stop(): Promise<void>;
}

let drains = 0;

export function drainProfiler(name: string): DrainProfiler {
  const folder = process.env.BENCH_CPU_PROFILE;
  if (!folder) return { start: () => undefined, stop: () => Promise.resolve() };
  const session = new Session();
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params ?? {}, (error, result) => (error ? reject(error) : resolve(result))),
    );
  let started: Promise<unknown> | undefined;
  return {
    start() {
      session.connect();
      started = post('Profiler.enable')
        .then(() => post('Profiler.setSamplingInterval', { interval: 200 }))
        .then(() => post('Profiler.start'));
    },
    async stop() {
      if (!started) return;
      await started;
      const { profile } = (await post('Profiler.stop')) as { profile: unknown };
      session.disconnect();
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, `${String(++drains).padStart(2, '0')}-${name}.cpuprofile`), JSON.stringify(profile));
    },
  };
}
