'use strict';
/*
 * Start-up latency: from `app.init()` returning (the end of `NestFactory.createApplicationContext`) to the start of
 * the body of a workflow enqueued before the boot, on a schema that already exists (an application restarting).
 * Each sample is a fresh Node process (module loading and JIT as in a real start); also reported: the boot itself
 * and, from init's return, the first claim statement sent (negative: sent during init, by the scheduler's bootstrap,
 * while the hooks of other providers run). With BENCH_BASELINE_DIST (an earlier build's dist/, copied inside the
 * repository so that its peers resolve from the root node_modules), its samples alternate with the current build's.
 *
 *   npm run build && npm run bench -- --startup        # BENCH_STARTUP_SAMPLES (default 15)
 */
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { LIBRARY_DIST, REPO_DIR } = require('../lib/config');

const DATABASE_URL =
  process.env.BENCH_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const SCHEMA = 'bench_startup';
const QUEUE = 'bench';
const SAMPLES = Number(process.env.BENCH_STARTUP_SAMPLES ?? 15);

/** The library of `dist` and its peers, resolved from there (one copy of @nestjs/* and reflect-metadata). */
function load(dist) {
  const from = (id) => require(require.resolve(id, { paths: [dist] }));
  from('reflect-metadata');
  return { common: from('@nestjs/common'), core: from('@nestjs/core'), pg: from('pg'), lib: require(dist) };
}

/** Boots the module with a `@Workflow()` `BenchTasks.run` that calls `onJob`. */
function startApp({ common, core, lib }, options, onJob = () => undefined) {
  class BenchTasks {
    async run() {
      onJob();
    }
  }
  common.Injectable()(BenchTasks);
  lib.Workflow()(BenchTasks.prototype, 'run', Object.getOwnPropertyDescriptor(BenchTasks.prototype, 'run'));
  class BenchModule {}
  common.Module({
    imports: [lib.DedupQueueModule.forRoot({ connection: { url: DATABASE_URL }, schema: SCHEMA, ...options })],
    providers: [BenchTasks],
  })(BenchModule);
  return core.NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
}

/** In the child: boot a worker of `dist`, time the first job, print the sample as JSON. */
async function child(dist) {
  const modules = load(dist);
  const original = modules.pg.Client.prototype.query;
  let firstClaim = null;
  modules.pg.Client.prototype.query = function query(config, ...rest) {
    const text = typeof config === 'string' ? config : config && config.text;
    if (firstClaim === null && typeof text === 'string' && /\bclaimable\b/.test(text))
      firstClaim = process.hrtime.bigint();
    return original.call(this, config, ...rest);
  };
  let bodyStarted;
  const started = new Promise((resolve) => (bodyStarted = resolve));
  const tBoot = process.hrtime.bigint();
  const app = await startApp(modules, { queues: [{ name: QUEUE, workerConcurrency: 8 }] }, () =>
    bodyStarted(process.hrtime.bigint()),
  );
  const tReady = process.hrtime.bigint();
  const tBody = await started;
  await app.close();
  const ms = (from, to) => Number(to - from) / 1e6;
  process.stdout.write(
    JSON.stringify({
      bootMs: ms(tBoot, tReady),
      readyToFirstClaimMs: firstClaim === null ? null : ms(tReady, firstClaim),
      readyToFirstJobMs: ms(tReady, tBody),
    }),
  );
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function main() {
  const builds = [['current', LIBRARY_DIST]];
  if (process.env.BENCH_BASELINE_DIST)
    builds.push(['baseline', path.resolve(REPO_DIR, process.env.BENCH_BASELINE_DIST)]);
  const modules = load(LIBRARY_DIST);
  const pool = new modules.pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  pool.on('error', () => undefined);
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const producer = await startApp(modules, { worker: false, queues: [{ name: QUEUE }] });
  const queues = producer.get(modules.lib.QueueService);
  const samples = new Map(builds.map(([name]) => [name, []]));
  try {
    for (let i = 0; i < SAMPLES; i++) {
      for (const [name, dist] of i % 2 === 0 ? builds : [...builds].reverse()) {
        await queues.enqueue(QUEUE, 'BenchTasks.run', []);
        const out = execFileSync(process.execPath, [__filename, '--child', dist], { encoding: 'utf8' });
        samples.get(name).push(JSON.parse(out));
      }
    }
  } finally {
    await producer.close();
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
    await pool.end();
  }
  for (const [name, runs] of samples) {
    const show = (key) => {
      const values = runs.map((sample) => sample[key]).filter((value) => value !== null);
      const fmt = (value) => value.toFixed(1);
      return `${fmt(median(values))} ms (min ${fmt(Math.min(...values))}, max ${fmt(Math.max(...values))})`;
    };
    console.log(`${name}: start-up over ${runs.length} processes, medians:`);
    console.log(`  boot (createApplicationContext)     ${show('bootMs')}`);
    console.log(`  init returned -> first claim sent   ${show('readyToFirstClaimMs')}`);
    console.log(`  init returned -> first job started  ${show('readyToFirstJobMs')}`);
  }
}

module.exports = { main };
if (require.main === module) {
  const at = process.argv.indexOf('--child');
  (at >= 0 ? child(process.argv[at + 1]) : main()).catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
