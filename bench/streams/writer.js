'use strict';
/* The writer process of the streams benchmark: a worker of its queue until its parent tells it to stop. */
const { boot } = require('./module');

async function main() {
  const { app } = await boot(process.env.STREAMS_BENCH_URL, { worker: true, applicationName: 'streams-writer' });
  process.send({ type: 'ready' });
  process.on('message', async (message) => {
    if (message.type !== 'stop') return;
    await app.close();
    process.exit(0);
  });
  process.on('disconnect', () => process.exit(2));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
