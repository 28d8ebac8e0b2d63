import { InvalidArgumentError, UnknownQueueError, UnknownWorkflowError } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { RecordingTasks } from './fixtures/recording-tasks';
import { waitFor } from './support/wait-for';

describe('bad input is refused with a typed error before anything is written', () => {
  const schema = uniqueSchema('invalid');
  let app: QueueApp;
  let tasks: RecordingTasks;
  let pool: Pool;
  let storedId: string;

  const snapshot = async () =>
    (await pool.query(`SELECT workflow_id, status, active_deduplication_id FROM "${schema}".workflows ORDER BY seq`))
      .rows;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema, queues: [{ name: 'tasks' }] }, [RecordingTasks]);
    tasks = app.get(RecordingTasks);
    storedId = (await app.queues.enqueue('tasks', tasks.blocked, ['held'], { deduplicationId: 'held' })).workflowId;
    await waitFor(() => tasks.running === 1, { what: 'the stored workflow to be running' });
  });

  afterAll(async () => {
    tasks.gate('held').open();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const cases: Array<[string, () => Promise<unknown>, new (...args: never[]) => Error, RegExp]> = [
    [
      'an undeclared queue',
      () => app.queues.enqueue('nope', tasks.echo, [1]),
      UnknownQueueError,
      /Queue "nope" is not declared.*"tasks"/,
    ],
    [
      'an unregistered workflow name',
      () => app.queues.enqueue('tasks', 'Nope.run', []),
      UnknownWorkflowError,
      /"Nope.run" is not registered/,
    ],
    [
      'a function that is not a @Workflow()',
      () => app.queues.enqueue('tasks', async () => 1, []),
      UnknownWorkflowError,
      /"\(anonymous function\)" is not registered: the function has no @Workflow\(\) decorator/,
    ],
    [
      'a method of a provider without @Workflow(), naming the decorator and the registered workflows',
      () => app.queues.enqueue('tasks', tasks.gate as never, ['x']),
      UnknownWorkflowError,
      /^Workflow "gate" is not registered: the function has no @Workflow\(\) decorator: decorate the method with @Workflow\(\).*\(registered: "RecordingTasks\.echo", .*"RecordingTasks\.blocked"/,
    ],
    [
      'a bound workflow method',
      () => app.queues.enqueue('tasks', tasks.echo.bind(tasks), [1]),
      UnknownWorkflowError,
      /not a bound or wrapped function/,
    ],
    [
      "enqueueMany with an item's own onDuplicate (a policy of the whole call)",
      () =>
        app.queues.enqueueMany('tasks', tasks.echo, [
          { args: [1], options: { deduplicationId: 'bulk-1' } },
          { args: [2], options: { deduplicationId: 'held', onDuplicate: 'return-existing' } as never },
        ]),
      InvalidArgumentError,
      /^items\[1\]\.options\.onDuplicate is an option of the whole call: enqueueMany\(queue, workflow, items, \{ onDuplicate/,
    ],
    [
      "enqueueMany with an item's own whenRunning",
      () =>
        app.queues.enqueueMany('tasks', tasks.echo, [
          { args: [1], options: { deduplicationId: 'held', whenRunning: 'queue-next' } as never },
        ]),
      InvalidArgumentError,
      /^items\[0\]\.options\.whenRunning is not taken by enqueueMany/,
    ],
    [
      'args that are not an array',
      () => app.queues.enqueue('tasks', tasks.echo, 'x' as never),
      InvalidArgumentError,
      /^args must be an array/,
    ],
    [
      'an empty deduplication ID',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { deduplicationId: '' }),
      InvalidArgumentError,
      /^options.deduplicationId must not be empty/,
    ],
    [
      'an over-long deduplication ID',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { deduplicationId: 'x'.repeat(256) }),
      InvalidArgumentError,
      /at most 255 characters, got 256/,
    ],
    [
      'an over-long deduplication ID counted in code points (256 emoji)',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { deduplicationId: '😀'.repeat(256) }),
      InvalidArgumentError,
      /at most 255 characters, got 256/,
    ],
    [
      'a deduplication ID that is not a string',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { deduplicationId: 42 as never }),
      InvalidArgumentError,
      /must be a string, got number/,
    ],
    [
      'a NUL character in a key',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { workflowId: 'a\u0000b' }),
      InvalidArgumentError,
      /NUL/,
    ],
    [
      'a misspelt option (deduplication would be off)',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { dedupId: 'u1' } as never),
      InvalidArgumentError,
      /^options\.dedupId is not an option; did you mean "deduplicationId"\?/,
    ],
    [
      "DBOS's spelling of deduplicationId",
      () => app.queues.enqueue('tasks', tasks.echo, [1], { deduplicationID: 'u1' } as never),
      InvalidArgumentError,
      /^options\.deduplicationID is not an option; did you mean "deduplicationId"\?/,
    ],
    [
      'an unknown queue limit',
      () => app.queues.setQueueLimits('tasks', { maxConcurrency: 2 } as never),
      InvalidArgumentError,
      /^limits\.maxConcurrency is not an option/,
    ],
    [
      'an empty workflow ID',
      () => app.queues.enqueue('tasks', tasks.echo, [1], { workflowId: '' }),
      InvalidArgumentError,
      /^options.workflowId must not be empty/,
    ],
    [
      'a circular argument',
      () => {
        const a: Record<string, unknown> = {};
        a.self = a;
        return app.queues.enqueue('tasks', tasks.echo, [a]);
      },
      InvalidArgumentError,
      /args\[0\]\.self is a circular reference/,
    ],
    [
      'a BigInt argument',
      () => app.queues.enqueue('tasks', tasks.echo, [{ amount: BigInt(10) }]),
      InvalidArgumentError,
      /args\[0\]\.amount is a BigInt/,
    ],
    [
      'a Map argument',
      () => app.queues.enqueue('tasks', tasks.echo, [new Map()]),
      InvalidArgumentError,
      /args\[0\] is a Map/,
    ],
    [
      'a NaN argument',
      () => app.queues.enqueue('tasks', tasks.echo, [[1, NaN]]),
      InvalidArgumentError,
      /args\[0\]\[1\] is NaN/,
    ],
    [
      'a function argument',
      () => app.queues.enqueue('tasks', tasks.echo, [{ f: () => 1 }]),
      InvalidArgumentError,
      /args\[0\]\.f is a function/,
    ],
  ];

  it.each(cases)('%s', async (_, call, errorType, message) => {
    const before = await snapshot();
    const error = await call().then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(errorType);
    expect((error as Error).name).toBe(errorType.name);
    expect((error as Error).message).toMatch(message);
    expect(await snapshot()).toEqual(before);
  });

  it('counts characters as Unicode code points, as Postgres does: 255 emoji (510 UTF-16 units) are a valid key', async () => {
    const key = '😀'.repeat(255);
    expect(key.length).toBe(510);
    const handle = await app.queues.enqueue('tasks', tasks.echo, ['astral'], { deduplicationId: key, workflowId: key });
    await expect(handle.getResult()).resolves.toBe('astral');
    const { rows } = await pool.query(
      `SELECT char_length(deduplication_id) AS key_length, deduplication_id = $2 AS same_key, char_length(workflow_id) AS id_length
       FROM "${schema}".workflows WHERE workflow_id = $1`,
      [handle.workflowId, key],
    );
    expect(rows).toEqual([{ key_length: 255, same_key: true, id_length: 255 }]);
    for (const table of ['workflow_queue', 'workflow_history']) {
      await pool.query(`DELETE FROM "${schema}".${table} WHERE workflow_id = $1`, [handle.workflowId]);
    }
  });

  it('keeps the stored workflow and its held key intact through all of the above', async () => {
    expect(await snapshot()).toEqual([{ workflow_id: storedId, status: 'PENDING', active_deduplication_id: 'held' }]);
  });

  it('records a result JSON cannot hold as a failure of the workflow, not as a silent change', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.returnsBigInt, []);
    await expect(handle.getResult()).rejects.toThrow(/The result is a BigInt/);
    await expect(handle.getStatus()).resolves.toMatchObject({
      status: 'ERROR',
      error: { name: 'UnstorableValueError' },
    });
  });

  it('refuses list() limits and offsets out of range', async () => {
    await expect(app.queues.list({ limit: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(app.queues.list({ offset: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(app.queues.list({ offset: 1.5 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
