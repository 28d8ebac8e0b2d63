/*
 * node -r ./test/support/swc-register.js bench/citus/one-server-shards.ts: whether splitting one hot queue into
 * shards would pay on one PostgreSQL server (issue 36 item 3). W2 (no-op jobs drained by one worker of 32 slots) on a
 * throwaway server, interleaved: the jobs in one queue, and the same jobs spread over SHARDS_ONE_SERVER_SHARDS queue
 * names (default 8; the worker's slots split equally), the shape a queue stored under one name per shard would
 * have there. Medians of SHARDS_ONE_SERVER_REPS (default 3) drains of SHARDS_ONE_SERVER_JOBS (default 5,000), with
 * the server's CPU per job from /proc.
 */
import { startPostgresServer } from '../../test/support/postgres-server';
import { procCpuMeter } from './server-processes';
import { BenchDatabase, drain, dropSchema, median, prefill, SINGLE_SERVER_SETTINGS } from './workload';

const count = (name: string, fallback: number) => Number(process.env[name] || fallback);

async function main(): Promise<void> {
  const shards = count('SHARDS_ONE_SERVER_SHARDS', 8);
  const reps = count('SHARDS_ONE_SERVER_REPS', 3);
  const jobs = count('SHARDS_ONE_SERVER_JOBS', 5000);
  const server = await startPostgresServer({ binaries: 'debian', settings: SINGLE_SERVER_SETTINGS });
  const database: BenchDatabase = { url: server.url, distribution: 'single' };
  const meter = procCpuMeter([server.dataDir]);
  const shapes = [
    { label: 'one queue', queues: ['hot'] },
    { label: `${shards} queue names`, queues: Array.from({ length: shards }, (_, i) => `hot-${i}`) },
  ];
  const results = new Map(shapes.map((shape) => [shape.label, [] as Array<{ rate: number; cpu: number }>]));
  try {
    for (let rep = 0; rep < reps; rep++) {
      for (const shape of rep % 2 === 0 ? shapes : [...shapes].reverse()) {
        const schema = `shards_bench_${rep}_${shape.queues.length}`;
        await prefill(database, schema, shape.queues, jobs);
        const run = await drain(database, schema, shape.queues, jobs, meter);
        await dropSchema(database, schema);
        const measured = { rate: run.count / run.seconds, cpu: (run.serverCpuSeconds[0] * 1e6) / run.count };
        results.get(shape.label)?.push(measured);
        process.stderr.write(`${shape.label}: ${measured.rate.toFixed(0)} jobs/s, ${measured.cpu.toFixed(0)} µs/job\n`);
      }
    }
  } finally {
    await server.dispose();
  }
  console.log(`| W2, ${jobs} no-op jobs, one worker of 32 slots | jobs/s | server CPU per job |`);
  console.log('|---|---:|---:|');
  for (const [label, runs] of results) {
    const rates = runs.map((run) => run.rate);
    console.log(
      `| ${label} | ${median(rates).toFixed(0)} (${Math.min(...rates).toFixed(0)}-${Math.max(...rates).toFixed(0)}) | ` +
        `${median(runs.map((run) => run.cpu)).toFixed(0)} µs |`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
