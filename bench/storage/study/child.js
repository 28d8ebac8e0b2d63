'use strict';
// One measured phase of one candidate, in a process of its own: `node child.js '<json>'` with { candidate, role
// (enqueue | drain), url, jobs, keyPrefix }. Reports { seconds, statements, cpu } when done, then waits for
// `close` to close its connections (after the study has read the backends' CPU).
const { CANDIDATES } = require('./candidates');

const spec = JSON.parse(process.argv[2]);
process.on('unhandledRejection', (error) => {
  process.send({ type: 'error', message: String((error && error.stack) || error) });
  process.exit(1);
});

(async () => {
  const candidate = CANDIDATES[spec.candidate]();
  const cpu = process.cpuUsage();
  const started = performance.now();
  const result = await candidate[spec.role](spec);
  // NOTE: a worker's boot (the module's, graphile-worker's) is not the drain's: it counts from `cpuAtStart` when given.
  const used = process.cpuUsage(result.cpuAtStart ?? cpu);
  process.once('message', async () => {
    await result.close();
    process.exit(0);
  });
  process.send({
    type: 'done',
    seconds: result.seconds ?? (performance.now() - started) / 1000,
    statements: result.statements ?? null,
    clientCpuSeconds: (used.user + used.system) / 1e6,
  });
})();
