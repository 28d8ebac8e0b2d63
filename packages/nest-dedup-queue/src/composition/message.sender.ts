import { Injectable } from '@nestjs/common';
import { MessageStore } from '../database/message.store';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { SendOptions } from '../interfaces/message-options.interface';
import { UnstorableValueError, toStoredJson } from '../utils/stored-json';
import { topicOf } from './workflow-messages';
import { ModuleLogger } from '../utils/module-logger';

/**
 * Sends messages to workflows (`QueueService.send`): finds the workflow's queue by its ID, stores the message (once
 * per idempotency key), and wakes the workflow if it waits in `recv` on that topic.
 */
@Injectable()
export class MessageSender {
  private readonly logger = new ModuleLogger('DedupQueueModule');

  constructor(private readonly messages: MessageStore) {}

  async send(workflowId: string, message: unknown, options: SendOptions = {}): Promise<void> {
    if (typeof workflowId !== 'string' || workflowId.length === 0) {
      throw new InvalidArgumentError('workflowId', 'must be a non-empty string');
    }
    const topic = topicOf(options.topic, 'options.topic');
    const key = options.idempotencyKey;
    if (key !== undefined && (typeof key !== 'string' || key.length === 0)) {
      throw new InvalidArgumentError('options.idempotencyKey', 'must be a non-empty string, or left out');
    }
    let messageJson: string;
    try {
      messageJson = toStoredJson(message, 'message');
    } catch (error) {
      if (error instanceof UnstorableValueError) throw new InvalidArgumentError(error.path, error.reason);
      throw error;
    }
    const target = await this.messages.findTarget(workflowId);
    if (!target) throw new WorkflowNotFoundError(workflowId);
    await this.messages.insert(target, workflowId, topic, messageJson, key ?? null);
    if (await this.messages.countAndWake(target.queueName, workflowId, topic)) {
      this.logger.debug(`Workflow ${workflowId} woke up for a message`);
    }
  }
}
