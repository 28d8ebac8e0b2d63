'use strict';
/*
 * The CPU cost that metrics and tracing add to one workflow, without the database (steadier than throughput on a
 * shared machine): what the library does for one enqueue and one run (the lifecycle events enqueued, started,
 * completed; a `send` span around the enqueue and a `process` span around the run), 100,000 times, with no
 * observability, with metrics (prom-client counters and histograms), with tracing (NodeTracerProvider,
 * BatchSpanProcessor, spans dropped by the exporter), and both. Uses the library's internal classes from its build.
 *
 *   node bench/observability/per-workflow-cost.js
 */
const path = require('node:path');
const { fromRoot, median } = require('./common');

const DIST = path.resolve(__dirname, '../../packages/nest-dedup-queue/dist');
const { WorkflowLifecycle } = require(path.join(DIST, 'observability/workflow-lifecycle.events'));
const { WorkflowTracer } = require(path.join(DIST, 'observability/workflow.tracer'));
const { QueueMetrics } = require(path.join(DIST, 'reporting/queue.metrics'));
const { trace } = fromRoot('@opentelemetry/api');
const { BatchSpanProcessor } = fromRoot('@opentelemetry/sdk-trace-base');
const { NodeTracerProvider } = fromRoot('@opentelemetry/sdk-trace-node');
const { Registry } = fromRoot('prom-client');

const N = 100_000;
const REPS = 5;
const OUTCOME = { workflowId: 'w', status: 'SUCCESS', outputJson: null, error: null };

async function measure(mode) {
  const lifecycle = new WorkflowLifecycle();
  const tracer = new WorkflowTracer(lifecycle);
  const provider = mode.includes('tracing')
    ? new NodeTracerProvider({
        spanProcessors: [
          new BatchSpanProcessor({ export: (spans, done) => done({ code: 0 }), shutdown: async () => {} }),
        ],
      })
    : undefined;
  provider?.register();
  let metrics;
  if (mode.includes('metrics')) {
    const config = { queues: new Map([['bench', {}]]) };
    metrics = new QueueMetrics({ metrics: { registry: new Registry() } }, config, lifecycle, { schemaSql: '"x"' });
    await metrics.onModuleInit();
  }
  const started = performance.now();
  for (let i = 0; i < N; i++) {
    const workflow = { workflowId: `w${i}`, queueName: 'bench', workflowName: 'BenchTasks.run', traceContext: null };
    await tracer.send('bench', [workflow], async () => {
      lifecycle.emit({
        event: 'enqueued',
        workflowId: workflow.workflowId,
        queueName: 'bench',
        workflowName: 'BenchTasks.run',
      });
    });
    const ref = { workflowId: workflow.workflowId, queueName: 'bench', workflowName: 'BenchTasks.run' };
    lifecycle.emit({ event: 'started', ...ref, attempt: 1, waitSeconds: 0.01 });
    const run = { ...ref, attempts: 1, traceContext: workflow.traceContext };
    await tracer.process('bench', run, async () => OUTCOME);
    lifecycle.emit({ event: 'completed', ...ref, attempt: 1, durationMs: 2 });
  }
  const microsPerWorkflow = ((performance.now() - started) * 1000) / N;
  metrics?.onModuleDestroy();
  if (provider) {
    await provider.shutdown();
    trace.disable();
  }
  return microsPerWorkflow;
}

async function main() {
  const modes = ['none', 'metrics', 'tracing', 'metrics+tracing'];
  const results = Object.fromEntries(modes.map((mode) => [mode, []]));
  for (let rep = 0; rep < REPS; rep++) for (const mode of modes) results[mode].push(await measure(mode));
  const base = median(results.none);
  console.log(`${N} workflows (one enqueue and one run each), medians of ${REPS}`);
  console.table(
    Object.fromEntries(
      modes.map((mode) => [
        mode,
        { 'µs per workflow': median(results[mode]).toFixed(2), 'added µs': (median(results[mode]) - base).toFixed(2) },
      ]),
    ),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
