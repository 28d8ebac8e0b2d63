import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { parentPort, workerData } from 'node:worker_threads';
import { WorkflowThreadError } from '../errors/workflow-thread.error';
import { executionFrames } from '../execution/execution-frames';
import { toErrorInfo } from '../utils/error-info';
import { toStoredJson } from '../utils/stored-json';
import type { FromThread, ThreadData, ToThread } from '../isolation/thread-messages';
import { ForwardingLogger } from './forwarding-logger';
import { IsolatedProviders } from './isolated-providers';
import { ThreadRun } from './thread-run';

/*
 * The script of a worker thread of the isolation pool (see `ThreadPool`): it runs isolated bodies one at a time, as
 * the main thread asks, in frames whose inside-workflow calls go back to the main thread (`ThreadRun`).
 */

const port = parentPort!;
const post = (message: FromThread): void => port.postMessage(message);
const logger = new ForwardingLogger(post);
Logger.overrideLogger(logger);
const { queueNames, inputLimits } = workerData as ThreadData;
const providers = new IsolatedProviders(queueNames, logger);
const runs = new Map<number, ThreadRun>();

port.on('message', (message: ToThread) => {
  switch (message.kind) {
    case 'load':
      return void load(message);
    case 'run':
      return void run(message);
    case 'abort':
      return runs.get(message.runId)?.abort(message.reason);
    case 'reply':
      return runs.get(message.runId)?.reply(message);
    case 'invoke':
      return void runs.get(message.runId)?.invoke(message);
    case 'end':
      runs.get(message.runId)?.end();
      runs.delete(message.runId);
      return;
    case 'close':
      return void providers.close().finally(() => process.exit(0));
  }
});

async function load({ targets }: Extract<ToThread, { kind: 'load' }>): Promise<void> {
  const failures: Extract<FromThread, { kind: 'loaded' }>['failures'] = [];
  for (const target of targets) {
    await providers.providerOf(target).catch((error: unknown) => failures.push({ target, error: toErrorInfo(error) }));
  }
  post({ kind: 'loaded', failures });
}

async function run({ runId, target, context, inputsJson }: Extract<ToThread, { kind: 'run' }>): Promise<void> {
  const threadRun = new ThreadRun(runId, context, post);
  runs.set(runId, threadRun);
  try {
    const provider = await providers.providerOf(target).catch((error: unknown) => {
      throw new WorkflowThreadError(
        context.workflowId,
        'load-failed',
        `could not build ${target.className}: ${message(error)}`,
      );
    });
    const args = JSON.parse(inputsJson) as unknown[];
    const result = await executionFrames.run(threadRun.frame, () => provider[target.methodName](...args));
    post({
      kind: 'done',
      runId,
      outputJson: result === undefined ? null : toStoredJson(result, 'The result', inputLimits),
    });
  } catch (error) {
    post({ kind: 'failed', runId, error: toErrorInfo(error) });
  } finally {
    runs.delete(runId);
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
