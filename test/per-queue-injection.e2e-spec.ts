/**
 * Per-queue injection: `DedupQueueModule.registerQueue()` in a feature module declares a queue (its limits merged
 * with forRoot's queues), `@InjectQueue(name)` gives its `WorkflowQueue`, `getQueueToken(name)` its token, and
 * `@Workflow({ queue })` a workflow's default queue. Driven through a real HTTP controller.
 */
import { Controller, INestApplication, Injectable, Module, Param, Post, UseFilters } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupExceptionFilter,
  DedupQueueConfigurationError,
  DedupQueueDashboardModule,
  DedupQueueModule,
  DedupQueueModuleOptions,
  InjectQueue,
  InvalidArgumentError,
  QueueService,
  ScheduleService,
  UnknownQueueError,
  Workflow,
  WorkflowQueue,
  getQueueToken,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { Registry } from 'prom-client';
import request from 'supertest';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

/** Holds every run until `open()`; counts the runs in flight and the most seen at once. */
class Gate {
  running = 0;
  maxRunning = 0;
  private release!: () => void;
  private readonly opened = new Promise<void>((resolve) => (this.release = resolve));

  async pass(): Promise<void> {
    this.running += 1;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      await this.opened;
    } finally {
      this.running -= 1;
    }
  }

  open(): void {
    this.release();
  }
}

let gate = new Gate();

@Injectable()
class AudioTasks {
  @Workflow({ queue: 'audio' })
  async transcode(fileId: string): Promise<string> {
    await gate.pass();
    return `${fileId}.mp3`;
  }

  @Workflow()
  async untargeted(): Promise<string> {
    return 'done';
  }
}

@Injectable()
class AudioService {
  constructor(
    @InjectQueue('audio') private readonly audio: WorkflowQueue,
    private readonly tasks: AudioTasks,
  ) {}

  transcode(fileId: string) {
    return this.audio.enqueue(this.tasks.transcode, [fileId], { deduplicationId: fileId });
  }

  get queueName(): string {
    return this.audio.name;
  }
}

@Controller('audio')
@UseFilters(DedupExceptionFilter)
class AudioController {
  constructor(private readonly audio: AudioService) {}

  @Post(':fileId')
  async transcode(@Param('fileId') fileId: string): Promise<{ workflow_id: string }> {
    return { workflow_id: (await this.audio.transcode(fileId)).workflowId };
  }
}

const audioQueue = DedupQueueModule.registerQueue({ name: 'audio', workerConcurrency: 2 });

@Module({
  imports: [audioQueue],
  controllers: [AudioController],
  providers: [AudioTasks, AudioService],
  exports: [audioQueue],
})
class AudioModule {}

function root(schema: string, options: Partial<DedupQueueModuleOptions> = {}) {
  return DedupQueueModule.forRoot({
    connection: { url: databaseUrl() },
    schema,
    queues: [{ name: 'tasks' }],
    pollIntervalMs: 200,
    ...options,
  });
}

describe('registerQueue + @InjectQueue in a feature module', () => {
  const schema = uniqueSchema('per_queue');
  const registry = new Registry();
  let app: INestApplication;
  let pool: Pool;
  let queues: QueueService;

  beforeAll(async () => {
    pool = testPool();
    const module = await Test.createTestingModule({
      imports: [
        root(schema, { metrics: { registry } }),
        AudioModule,
        DedupQueueDashboardModule.forRoot({ path: '/queues' }),
      ],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    queues = app.get(QueueService);
  });

  afterAll(async () => {
    gate.open();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('enqueues through the injected WorkflowQueue over HTTP: 201, then 409 naming the registered queue', async () => {
    gate = new Gate();
    const server = app.getHttpServer();
    const first = await request(server).post('/audio/f1').expect(201);
    const duplicate = await request(server).post('/audio/f1').expect(409);
    expect(duplicate.body).toMatchObject({
      statusCode: 409,
      queueName: 'audio',
      deduplicationId: 'f1',
      existingWorkflowId: first.body.workflow_id,
    });
    gate.open();
    const handle = await queues.retrieve<string>(first.body.workflow_id);
    await expect(handle.getResult()).resolves.toBe('f1.mp3');
    expect((await handle.getStatus()).queueName).toBe('audio');
    const again = await request(server).post('/audio/f1').expect(201);
    await expect((await queues.retrieve(again.body.workflow_id)).getResult()).resolves.toBe('f1.mp3');
  });

  it("honours registerQueue's workerConcurrency: 2 of 5 run at once, the rest wait ENQUEUED", async () => {
    gate = new Gate();
    const audio = app.get(AudioService);
    const handles = await Promise.all(['c1', 'c2', 'c3', 'c4', 'c5'].map((id) => audio.transcode(id)));
    try {
      await waitFor(() => gate.running === 2, { what: 'two runs in flight' });
      const counts = await queues.countByStatus('audio');
      expect(counts.audio).toMatchObject({ PENDING: 2, ENQUEUED: 3 });
      expect(await queues.getQueueSettings('audio')).toMatchObject({ workerConcurrency: 2, paused: false });
    } finally {
      gate.open();
    }
    await Promise.all(handles.map((handle) => handle.getResult()));
    expect(gate.maxRunning).toBe(2);
  });

  it('lists the registered queue in the dashboard and the metrics like a forRoot queue', async () => {
    const { body } = await request(app.getHttpServer()).get('/queues/api/queues').expect(200);
    expect(body.queues.map((queue: { name: string }) => queue.name).sort()).toEqual(['audio', 'tasks']);
    expect(await registry.getSingleMetricAsString('dedup_queue_enqueued_total')).toMatch(/queue="audio"\} [1-9]/);
  });

  it("enqueues into a workflow's default queue when no queue is named; refuses a workflow without one", async () => {
    gate = new Gate();
    gate.open();
    const tasks = app.get(AudioTasks);
    const handle = await queues.enqueue(tasks.transcode, ['d1']);
    expect((await handle.getStatus()).queueName).toBe('audio');
    await expect(handle.getResult()).resolves.toBe('d1.mp3');
    const byName = await queues.enqueue<string>('AudioTasks.transcode', ['d2'], { deduplicationId: 'd2' });
    expect((await byName.getStatus()).queueName).toBe('audio');
    await expect(queues.enqueue(tasks.untargeted, [])).rejects.toThrow(InvalidArgumentError);
    await expect(queues.enqueue(tasks.untargeted, [])).rejects.toThrow(/"AudioTasks.untargeted" has no default queue/);
    const explicit = await queues.enqueue('tasks', tasks.transcode, ['d3']);
    expect((await explicit.getStatus()).queueName).toBe('tasks');
  });

  it("gives a run-time schedule the workflow's default queue", async () => {
    const schedules = app.get(ScheduleService);
    const workflow = AudioTasks.prototype.transcode;
    const created = await schedules.create({ name: 'nightly-audio', cron: '0 3 * * *', workflow });
    expect(created.queueName).toBe('audio');
    await schedules.remove('nightly-audio');
  });

  it('keeps each application to its own queues (no state shared across apps in one process)', async () => {
    const other = await Test.createTestingModule({ imports: [root(schema, { worker: false })] }).compile();
    await other.init();
    try {
      const enqueue = other.get(QueueService).enqueue('audio', 'AudioTasks.transcode', ['x']);
      await expect(enqueue).rejects.toThrow(UnknownQueueError);
    } finally {
      await other.close();
    }
  });
});

describe('getQueueToken', () => {
  it('lets a test replace the WorkflowQueue with Test.createTestingModule().overrideProvider()', async () => {
    const schema = uniqueSchema('per_queue_override');
    const pool = testPool();
    const enqueued: unknown[][] = [];
    const fake = {
      name: 'audio',
      enqueue: async (...call: unknown[]) => (enqueued.push(call), { workflowId: 'fake' }),
    };
    const module = await Test.createTestingModule({ imports: [root(schema, { worker: false }), AudioModule] })
      .overrideProvider(getQueueToken('audio'))
      .useValue(fake)
      .compile();
    await module.init();
    try {
      const audio = module.get(AudioService);
      await expect(audio.transcode('f9')).resolves.toEqual({ workflowId: 'fake' });
      expect(enqueued).toEqual([[AudioTasks.prototype.transcode, ['f9'], { deduplicationId: 'f9' }]]);
      expect(module.get<WorkflowQueue>(getQueueToken('audio'))).toBe(fake);
    } finally {
      await module.close();
      await dropSchema(pool, schema);
      await pool.end();
    }
  });

  it('is the token @InjectQueue uses, and names the queue', () => {
    expect(getQueueToken('audio')).toBe(getQueueToken('audio'));
    expect(getQueueToken('audio')).not.toBe(getQueueToken('video'));
    expect(getQueueToken('audio')).toContain('audio');
  });
});

/**
 * Closes an application whose `init()` failed, releasing its pool. NOTE: Nest's `close()` first awaits the failed
 * initialization and rethrows its error, closing nothing; the application is closed as if it had not been initialized.
 */
async function closeAfterFailedInit(app: { close(): Promise<void> }): Promise<void> {
  (app as unknown as { initializationPromise?: Promise<void> }).initializationPromise = undefined;
  await app.close();
}

describe('queue declarations refused at boot', () => {
  const schema = uniqueSchema('per_queue_boot');
  let pool: Pool;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    await dropSchema(pool, schema);
    await pool.end();
  });

  const boot = async (imports: unknown[]) => {
    const module = await Test.createTestingModule({ imports: imports as never[] }).compile();
    await module.close();
  };

  it('refuses a queue registered by two feature modules, naming both places', async () => {
    @Module({ imports: [DedupQueueModule.registerQueue({ name: 'audio' })] })
    class OtherAudioModule {}
    const modules = [root(schema, { worker: false }), AudioModule, OtherAudioModule];
    const error = await boot(modules).catch((failure: Error) => failure);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    // Each place is the file:line:column of the registerQueue() call, as the stack gives it.
    const place = String.raw`DedupQueueModule\.registerQueue\(\) at (\S+:\d+:\d+)`;
    const message = (error as Error).message;
    const twice = new RegExp(`queue "audio" is declared twice, in ${place} and in ${place};`);
    expect(message).toMatch(twice);
    const [, first, second] = twice.exec(message) as RegExpExecArray;
    expect(first).toMatch(/per-queue-injection\.e2e-spec\.ts:\d+:\d+$/);
    expect(first).not.toBe(second);
  });

  it('refuses a queue declared in forRoot and by registerQueue', async () => {
    const modules = [root(schema, { worker: false, queues: [{ name: 'audio' }] }), AudioModule];
    await expect(boot(modules)).rejects.toThrow(
      'queue "audio" is declared twice, in DedupQueueModule.forRoot({ queues }) and in ' +
        'DedupQueueModule.registerQueue()',
    );
  });

  it('refuses the same queue twice in one registerQueue call', async () => {
    @Module({ imports: [DedupQueueModule.registerQueue({ name: 'a' }, { name: 'a' })] })
    class TwiceModule {}
    await expect(boot([root(schema, { worker: false }), TwiceModule])).rejects.toThrow(/queue "a" is declared twice/);
  });

  it("refuses an unknown key as forRoot's queue options do, naming the near miss", async () => {
    @Module({ imports: [DedupQueueModule.registerQueue({ name: 'a', workerConcurency: 2 } as never)] })
    class TypoModule {}
    await expect(boot([root(schema, { worker: false }), TypoModule])).rejects.toThrow(
      '`registerQueue({ name: "a" }).workerConcurency` is not an option; did you mean "workerConcurrency"?',
    );
  });

  it('refuses a bad limit of a registered queue', async () => {
    @Module({ imports: [DedupQueueModule.registerQueue({ name: 'a', concurrency: 0 })] })
    class BadLimitModule {}
    await expect(boot([root(schema, { worker: false }), BadLimitModule])).rejects.toThrow(
      '`registerQueue({ name: "a" }).concurrency` must be a positive integer',
    );
  });

  it('refuses a @Workflow({ queue }) that names an undeclared queue', async () => {
    @Injectable()
    class Misplaced {
      @Workflow({ queue: 'nowhere' })
      async run(): Promise<void> {}
    }
    const module = await Test.createTestingModule({
      imports: [root(schema, { worker: false })],
      providers: [Misplaced],
    }).compile();
    await expect(module.init()).rejects.toThrow(
      'Misplaced.run: @Workflow({ queue: "nowhere" }) names a queue that is not declared (declared: "tasks")',
    );
    await closeAfterFailedInit(module);
  });

  it('explains an @InjectQueue of an undeclared queue at boot: the queue, the declared ones, registerQueue', async () => {
    @Controller('typo')
    class TypoController {
      constructor(@InjectQueue('nam') readonly queue: WorkflowQueue) {}
    }
    const module = await Test.createTestingModule({
      imports: [root(schema, { worker: false }), AudioModule],
      controllers: [TypoController],
    }).compile();
    const app = module.createNestApplication({ logger: false });
    const error = await app.init().catch((failure: Error) => failure);
    await closeAfterFailedInit(app);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toBe(
      "DedupQueueModule: TypoController (in RootTestModule) injects @InjectQueue('nam'), but no " +
        'DedupQueueModule.registerQueue() declares a queue "nam" (declared queues: "tasks", "audio"). Declare it in ' +
        "the imports of RootTestModule: DedupQueueModule.registerQueue({ name: 'nam' }), or fix the name",
    );
  });

  it('explains an @InjectQueue of a forRoot queue: reached through QueueService', async () => {
    @Injectable()
    class TasksUser {
      constructor(@InjectQueue('tasks') readonly queue: WorkflowQueue) {}
    }
    const module = await Test.createTestingModule({
      imports: [root(schema, { worker: false })],
      providers: [TasksUser],
    }).compile();
    await expect(module.init()).rejects.toThrow(
      '"tasks" is declared in DedupQueueModule.forRoot({ queues }), whose queues are reached through QueueService',
    );
    await closeAfterFailedInit(module);
  });

  it('explains an @InjectQueue of a queue that another module declares but does not share', async () => {
    @Injectable()
    class Outsider {
      @InjectQueue('audio') readonly queue!: WorkflowQueue;
    }
    @Module({ providers: [Outsider] })
    class OutsiderModule {}
    const module = await Test.createTestingModule({
      imports: [root(schema, { worker: false }), AudioModule, OutsiderModule],
    }).compile();
    const error = await module.init().catch((failure: Error) => failure);
    await closeAfterFailedInit(module);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toMatch(
      /^DedupQueueModule: Outsider \(in OutsiderModule\) injects @InjectQueue\('audio'\), but OutsiderModule does not see that queue: it is declared by DedupQueueModule\.registerQueue\(\) at \S+per-queue-injection\.e2e-spec\.ts:\d+:\d+\. Import the module holding that registerQueue\(\) into OutsiderModule/,
    );
  });

  it('lets worker: { queues } name a registered queue', async () => {
    const module = await Test.createTestingModule({
      imports: [root(schema, { worker: { queues: ['audio'] } }), AudioModule],
    }).compile();
    await module.init();
    expect(module.get(AudioService).queueName).toBe('audio');
    await module.close();
  });
});
