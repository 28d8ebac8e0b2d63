import { Injectable } from '@nestjs/common';
import { Workflow } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';

@Injectable()
class FactoryTasks {
  constructor(private readonly greeting: string) {}

  @Workflow()
  async greet(name: string): Promise<string> {
    return `${this.greeting}, ${name}`;
  }
}

class ValueTasks {
  @Workflow({ name: 'values.double' })
  async double(n: number): Promise<number> {
    return n * 2;
  }
}

describe('discovery finds workflows on factory and value providers', () => {
  const schema = uniqueSchema('discovery');
  let app: QueueApp;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema }, [
      { provide: 'GREETER', useFactory: () => new FactoryTasks('hello') },
      { provide: 'VALUES', useValue: new ValueTasks() },
      { provide: 'SAME_VALUES', useExisting: 'VALUES' },
    ]);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs a workflow of a useFactory provider on the instance the factory made, passed by reference', async () => {
    const greeter = app.module.get<FactoryTasks>('GREETER');
    await expect((await app.queues.enqueue('tasks', greeter.greet, ['ada'])).getResult()).resolves.toBe('hello, ada');
  });

  it('runs a workflow of a useValue provider, registered once although provided under two tokens', async () => {
    await expect((await app.queues.enqueue('tasks', 'values.double', [21])).getResult()).resolves.toBe(42);
  });
});
