import { DynamicModule, Module, Provider } from '@nestjs/common';
import type { QueueOptions } from '../interfaces/queue-options.interface';
import { QueueService } from '../queue.service';
import { callSite } from '../utils/call-site';
import { QueueRegistration, queueRegistrationToken } from './queue-registration';
import { getQueueToken } from './queue-token';
import { WorkflowQueue } from './workflow-queue';

/** The module that `DedupQueueModule.registerQueue()` returns: a queue's registration and its `WorkflowQueue`. */
@Module({})
export class DedupQueueRegistrationModule {
  /** See `DedupQueueModule.registerQueue`. */
  static register(queues: QueueOptions[]): DynamicModule {
    const declaredAt = `DedupQueueModule.registerQueue() at ${callSite() ?? '(unknown place)'}`;
    const providers: Provider[] = [
      { provide: queueRegistrationToken(queues), useValue: new QueueRegistration(queues, declaredAt) },
      ...queues.map((queue) => ({
        provide: getQueueToken(queue?.name),
        useFactory: (service: QueueService) => new WorkflowQueue(queue.name, service),
        inject: [QueueService],
      })),
    ];
    return {
      module: DedupQueueRegistrationModule,
      providers,
      exports: queues.map((queue) => getQueueToken(queue?.name)),
    };
  }
}
