/*
 * node -r ./test/support/swc-register.js bench/citus/hot-queue-shards.ts: one hot queue on a Citus cluster of a
 * coordinator and HOT_SHARDS_WORKERS worker nodes (default 2; test/support/citus-cluster.ts, no CPU quotas), with and
 * without `shards: HOT_SHARDS_SHARDS` (default 8; issue 36 item 3). W2 (no-op jobs without keys, drained by one worker
 * of 32 slots), interleaved; medians of HOT_SHARDS_REPS (default 2) drains of HOT_SHARDS_JOBS (default 3,000), with
 * the CPU per job of the coordinator and of each worker node from /proc, and the transactions per job that committed
 * in two phases over several nodes (the rows each adds to `pg_dist_transaction`, whose recovery is turned off here).
 * With HOT_SHARDS_STATEMENTS=1 every node also preloads `pg_stat_statements`, and each drain prints, per node, the
 * statements and transactions per job and the statements called most often (a diagnosis: it costs CPU itself).
 * HOT_SHARDS_ENTRY=nodes drains with one instance on every worker node instead (the 32 slots shared), as
 * bench/citus/scale.ts does with CITUS_SCALE_ENTRY; the two-phase commits are counted on every node (each node
 * records those it coordinated).
 */
import { startCitusCluster } from '../../test/support/citus-cluster';
import type { TestPostgresServer } from '../../test/support/postgres-server';
import { procCpuMeter } from './server-processes';
import { BenchDatabase, DrainEntry, drain, dropSchema, median, prefill } from './workload';

const count = (name: string, fallback: number) => Number(process.env[name] || fallback);

async function main(): Promise<void> {
  const shards = count('HOT_SHARDS_SHARDS', 8);
  const reps = count('HOT_SHARDS_REPS', 2);
  const jobs = count('HOT_SHARDS_JOBS', 3000);
  const statements = process.env.HOT_SHARDS_STATEMENTS === '1';
  const onNodes = process.env.HOT_SHARDS_ENTRY === 'nodes';
  const cluster = await startCitusCluster({
    workers: count('HOT_SHARDS_WORKERS', 2),
    preload: statements ? ['pg_stat_statements'] : [],
  });
  const nodes = [cluster.coordinator, ...cluster.workers];
  if (statements) await cluster.coordinator.query('CREATE EXTENSION pg_stat_statements'); // Citus creates it on the nodes
  const database: BenchDatabase = { url: cluster.url, distribution: 'citus' };
  for (const node of nodes) {
    await node.query('ALTER SYSTEM SET citus.recover_2pc_interval = -1');
    await node.query('SELECT pg_reload_conf()');
  }
  const twoPhaseCommits = async () => {
    let total = 0;
    for (const node of nodes) {
      total += Number((await node.query<{ n: string }>('SELECT count(*) AS n FROM pg_dist_transaction'))[0].n);
    }
    return total;
  };
  const entries: DrainEntry[] | undefined = onNodes
    ? cluster.workers.map((worker) => ({
        url: worker.url,
        queueIndexes: [0],
        slotsPerQueue: Math.floor(32 / cluster.workers.length),
      }))
    : undefined;
  const meter = procCpuMeter([cluster.coordinator.dataDir, ...cluster.workers.map((worker) => worker.dataDir)]);
  const shapes = [
    { label: 'one queue', shards: undefined },
    { label: `one queue, shards: ${shards}`, shards },
  ];
  const results = new Map(
    shapes.map((shape) => [shape.label, [] as Array<{ rate: number; cpu: number[]; twoPhase: number }>]),
  );
  try {
    for (let rep = 0; rep < reps; rep++) {
      for (const shape of rep % 2 === 0 ? shapes : [...shapes].reverse()) {
        const schema = `hot_shards_${rep}_${shape.shards ?? 1}`;
        await prefill(database, schema, ['hot'], jobs, shape.shards);
        if (statements) await Promise.all(nodes.map(resetStatements));
        const before = await twoPhaseCommits();
        const run = await drain(database, schema, ['hot'], jobs, meter, 'split', shape.shards, entries);
        const twoPhase = ((await twoPhaseCommits()) - before) / run.count;
        if (statements) {
          for (const [i, node] of nodes.entries())
            await reportStatements(i === 0 ? 'coordinator' : `node ${i}`, node, run.count);
        }
        await dropSchema(database, schema);
        const cpu = run.serverCpuSeconds.map((s) => (s * 1e6) / run.count);
        const measured = { rate: run.count / run.seconds, cpu, twoPhase };
        results.get(shape.label)?.push(measured);
        process.stderr.write(
          `${shape.label}: ${measured.rate.toFixed(0)} jobs/s, µs/job ${measured.cpu.map((c) => c.toFixed(0)).join(' / ')}, ` +
            `2PC/job ${twoPhase.toFixed(3)}\n`,
        );
      }
    }
  } finally {
    await cluster.stop();
  }
  console.log(
    `| W2, ${jobs} no-op jobs, ${onNodes ? 'an instance on every worker node, 32 slots in all' : 'one worker of 32 slots'} | jobs/s | CPU per job: coordinator / nodes | 2PC per job |`,
  );
  console.log('|---|---:|---:|---:|');
  for (const [label, runs] of results) {
    const rates = runs.map((run) => run.rate);
    const cpu = runs[0].cpu.map((_, i) => median(runs.map((run) => run.cpu[i])).toFixed(0));
    console.log(
      `| ${label} | ${median(rates).toFixed(0)} (${Math.min(...rates).toFixed(0)}-${Math.max(...rates).toFixed(0)}) | ` +
        `${cpu.join(' / ')} µs | ${median(runs.map((run) => run.twoPhase)).toFixed(3)} |`,
    );
  }
}

async function resetStatements(node: TestPostgresServer): Promise<void> {
  await node.query('SELECT pg_stat_statements_reset()');
  await node.query('SELECT pg_stat_reset()');
}

/** Per job: the statements and commits of `node` since `resetStatements`, and the 12 called most often. */
async function reportStatements(label: string, node: TestPostgresServer, jobs: number): Promise<void> {
  const [totals] = await node.query<{ calls: string; ms: number; commits: string }>(
    `SELECT sum(calls) AS calls, sum(total_exec_time) AS ms,
            (SELECT sum(xact_commit) FROM pg_stat_database) AS commits
     FROM pg_stat_statements`,
  );
  const top = await node.query<{ calls: string; ms: number; query: string }>(
    `SELECT calls, total_exec_time AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
     FROM pg_stat_statements ORDER BY calls DESC LIMIT 12`,
  );
  const perJob = (n: string | number) => (Number(n) / jobs).toFixed(3);
  process.stderr.write(
    `  ${label}: ${perJob(totals.calls)} statements/job, ${perJob(totals.commits)} commits/job, ` +
      `${((totals.ms * 1000) / jobs).toFixed(0)} µs executing/job\n` +
      top
        .map((row) => `    ${perJob(row.calls)}/job ${((row.ms * 1000) / jobs).toFixed(0)} µs/job ${row.query}\n`)
        .join(''),
  );
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
