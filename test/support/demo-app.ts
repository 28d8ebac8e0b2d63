import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { AppModule } from '../../apps/demo/src/app.module';

/** The demo's AppModule as an initialised Nest HTTP application, its tables in `schema`, each task taking `taskMs`. */
export async function startDemoApp(schema: string, taskMs: number): Promise<INestApplication> {
  process.env.DEDUP_QUEUE_SCHEMA = schema;
  process.env.DEMO_TASK_MS = String(taskMs);
  const module = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const app = module.createNestApplication({ logger: false, forceCloseConnections: true });
  await app.init();
  return app;
}
