import type { Provider, Type } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { DedupQueueModule, DedupQueueModuleOptions, QueueService } from 'nest-dedup-queue';
import { databaseUrl } from './database';

export interface QueueApp {
  module: TestingModule;
  queues: QueueService;
  get<T>(type: Type<T>): T;
  close(): Promise<void>;
}

/** Boots a Nest application context with DedupQueueModule on the test database and the given providers. */
export async function startQueueApp(
  options: Partial<DedupQueueModuleOptions> & { schema: string },
  providers: Provider[] = [],
): Promise<QueueApp> {
  const module = await Test.createTestingModule({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: databaseUrl() },
        queues: [{ name: 'tasks' }],
        ...options,
      }),
    ],
    providers,
  }).compile();
  await module.init();
  return {
    module,
    queues: module.get(QueueService),
    get: (type) => module.get(type),
    close: () => module.close(),
  };
}
