import { DynamicModule, Global, Module, Type } from '@nestjs/common';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { executionFrames } from '../execution/execution-frames';
import { QueueService } from '../queue.service';
import { getQueueToken } from '../queues/queue-token';
import { WorkflowQueue } from '../queues/workflow-queue';
import { ScheduleService } from '../scheduling/schedule.service';
import { methodNames } from '../isolation/crossing';

/**
 * The library's services in a worker thread, for the providers the thread builds: `QueueService`,
 * `ScheduleService` and the `WorkflowQueue` of every declared queue (`@InjectQueue(name)`). Each method is forwarded
 * to the main thread's service and runs there in the calling run's frame, so that an enqueue in an isolated body is
 * its child, recorded at its position, as in any other body. Every method returns a promise here.
 */
@Global()
@Module({})
export class ThreadServicesModule {
  static register(queueNames: string[]): DynamicModule {
    const queueService = forwardingStub(QueueService);
    const providers = [
      { provide: QueueService, useValue: queueService },
      { provide: ScheduleService, useValue: forwardingStub(ScheduleService) },
      ...queueNames.map((name) => ({ provide: getQueueToken(name), useValue: new WorkflowQueue(name, queueService) })),
    ];
    return { module: ThreadServicesModule, providers, exports: providers.map(({ provide }) => provide) };
  }
}

/** An instance of `service` whose every method forwards the call to the main thread's instance. */
function forwardingStub<T>(service: Type<T>): T {
  const stub = Object.create(service.prototype as object) as Record<string, unknown>;
  for (const method of methodNames(service.prototype as object)) {
    stub[method] = (...args: unknown[]) => {
      const forward = executionFrames.getStore()?.forward;
      if (!forward) {
        return Promise.reject(
          new DedupQueueError(
            `${service.name}.${method}() works in a worker thread only while an isolated workflow runs there`,
          ),
        );
      }
      return forward({ service: service.name, method }, args);
    };
  }
  return stub as T;
}
