/*
 * `./workload` bound to one build of the library, so that a Citus benchmark can alternate two builds in one run: the
 * installed one (node_modules/nest-dedup-queue) and a baseline (a package folder holding package.json and dist, inside
 * this repository's node_modules, so that it resolves the same dependencies).
 */
import Module from 'node:module';

export type Workload = typeof import('./workload');

/**
 * `./workload` bound to the library at `packageDir` (its own copy of every library module), or to the installed one.
 * NOTE: Node answers a request it resolved before from the same folder from its own cache, before
 * `Module._resolveFilename`; so `Module._load` is wrapped, and the request for the library becomes `packageDir`.
 */
export function loadWorkload(packageDir?: string): Workload {
  const path = require.resolve('./workload');
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded per build, after the loader is set
  if (!packageDir) return require('./workload') as Workload;
  const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const load = loader._load;
  loader._load = function (request: string, ...rest: unknown[]) {
    return load.call(this, request === 'nest-dedup-queue' ? packageDir : request, ...rest);
  };
  delete require.cache[path];
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a second copy, bound to the other build
    return require('./workload') as Workload;
  } finally {
    loader._load = load;
    delete require.cache[path];
  }
}
