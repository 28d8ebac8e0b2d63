import { Injectable } from '@nestjs/common';
import { MessageStore } from '../database/messages/message.store';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { SendOptions } from '../interfaces/message-options.interface';
import { DedupQueueConfig } from '../dedup-queue.config';
import { optionalKey, storedArgument } from '../utils/enqueue-options.validation';
import { executionFrames } from '../execution/execution-frames';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import { topicOf } from './workflow-messages';
import { ModuleLogger } from '../utils/module-logger';

/** The step name a `send` from a workflow body records at its position. */
export const SEND_STEP = 'send';

/**
 * Sends messages to workflows (`QueueService.send`): finds the workflow's queue by its ID, stores the message (once
 * per idempotency key), and wakes the workflow if it waits in `recv` on that topic. Called from a workflow body
 * (outside a step), the send is recorded at the body's position, in the transaction that stores the message
 * (`WorkflowExecution.runRecorded`): re-executed, it sends nothing again.
 */
@Injectable()
export class MessageSender {
  private readonly logger = new ModuleLogger('DedupQueueModule');

  constructor(
    private readonly messages: MessageStore,
    private readonly config: DedupQueueConfig,
  ) {}

  async send(workflowId: string, message: unknown, options: SendOptions = {}): Promise<void> {
    if (typeof workflowId !== 'string' || workflowId.length === 0) {
      throw new InvalidArgumentError('workflowId', 'must be a non-empty string');
    }
    const topic = topicOf(options?.topic, 'options.topic');
    const key = optionalKey(options?.idempotencyKey, 'options.idempotencyKey');
    const messageJson = storedArgument(message, 'message', this.config.inputLimits);
    const frame = executionFrames.getStore();
    const store = (transaction?: TransactionSql) => this.store(workflowId, topic, messageJson, key, transaction);
    if (!frame || frame.inStep) return store();
    await frame.execution.runRecorded(SEND_STEP, store);
  }

  private async store(
    workflowId: string,
    topic: string,
    messageJson: string,
    idempotencyKey: string | null,
    transaction?: TransactionSql,
  ): Promise<undefined> {
    const target = await this.messages.findTarget(workflowId, transaction);
    if (!target) throw new WorkflowNotFoundError(workflowId);
    await this.messages.insert(target, workflowId, topic, messageJson, idempotencyKey, transaction);
    if (await this.messages.countAndWake(target.queueName, workflowId, topic, transaction)) {
      this.logger.debug(`Workflow ${workflowId} woke up for a message`);
    }
    return undefined;
  }
}
