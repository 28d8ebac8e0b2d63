/**
 * The policy table of docs/deduplication.md ("Every policy against every holder"), row by row: each policy against a
 * holder that is queued (never started), running, waiting (suspended in `sleep()`) and finished within its
 * deduplication window, with what the call returns or throws and what the holder is afterwards.
 */
import { Injectable } from '@nestjs/common';
import { DUPLICATE_TOPIC, EnqueueOptions, Workflow, sleep, workflowContext } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { Gate } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

@Injectable()
class TableTasks {
  readonly started = new Set<string>();
  readonly gates = new Map<string, Gate>();

  gate(label: string): Gate {
    let gate = this.gates.get(label);
    if (!gate) this.gates.set(label, (gate = new Gate()));
    return gate;
  }

  @Workflow()
  async hold(label: string, mode: 'block' | 'sleep' | 'return' = 'block'): Promise<string> {
    this.started.add(label);
    if (mode === 'sleep') await sleep(3_600_000);
    if (mode === 'block') await this.gate(label).wait();
    void workflowContext();
    return label;
  }
}

type Holder = 'queued' | 'running' | 'waiting' | 'window';
/** What the duplicate call gave: an error's name, the holder's handle, a new workflow, or the follow-up. */
type Outcome = 'QueueDeduplicatedError' | 'holder' | 'replaced' | 'follow-up' | 'superseded' | 'sent';

const POLICIES: Array<[string, EnqueueOptions, Record<Holder, Outcome>]> = [
  [
    'reject',
    { onDuplicate: 'reject' },
    {
      queued: 'QueueDeduplicatedError',
      running: 'QueueDeduplicatedError',
      waiting: 'QueueDeduplicatedError',
      window: 'QueueDeduplicatedError',
    },
  ],
  [
    'return-existing',
    { onDuplicate: 'return-existing' },
    { queued: 'holder', running: 'holder', waiting: 'holder', window: 'holder' },
  ],
  [
    'replace',
    { onDuplicate: 'replace' },
    {
      queued: 'replaced',
      running: 'QueueDeduplicatedError',
      waiting: 'QueueDeduplicatedError',
      window: 'QueueDeduplicatedError',
    },
  ],
  [
    'replace + return-existing',
    { onDuplicate: 'replace', whenRunning: 'return-existing' },
    { queued: 'replaced', running: 'holder', waiting: 'holder', window: 'holder' },
  ],
  [
    'replace + queue-next',
    { onDuplicate: 'replace', whenRunning: 'queue-next' },
    { queued: 'replaced', running: 'follow-up', waiting: 'follow-up', window: 'QueueDeduplicatedError' },
  ],
  [
    'supersede',
    { onDuplicate: 'supersede' },
    { queued: 'superseded', running: 'superseded', waiting: 'superseded', window: 'QueueDeduplicatedError' },
  ],
  [
    'send',
    { onDuplicate: 'send' },
    { queued: 'sent', running: 'sent', waiting: 'sent', window: 'QueueDeduplicatedError' },
  ],
];

const schema = uniqueSchema('policy_table');
const view = `"${schema}".workflows`;
let pool: Pool;
let app: QueueApp;
let tasks: TableTasks;

beforeAll(async () => {
  pool = testPool();
  app = await startQueueApp(
    {
      schema,
      connection: { url: databaseUrl(), poolSize: 6 },
      queues: [{ name: 'idle' }, { name: 'live', workerConcurrency: 50 }],
      worker: { queues: ['live'] },
      shutdownGraceMs: 500,
    },
    [TableTasks],
  );
  tasks = app.get(TableTasks);
});

afterAll(async () => {
  for (const gate of tasks?.gates.values() ?? []) gate.open();
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

const statusOf = async (workflowId: string) =>
  (await pool.query(`SELECT status FROM ${view} WHERE workflow_id = $1`, [workflowId])).rows[0]?.status as string;

/** Makes a holder of `key` in the given state; returns its ID and its queue. */
async function holderOf(kind: Holder, key: string): Promise<{ id: string; queue: string }> {
  const label = `${key}-holder`;
  if (kind === 'queued') {
    const handle = await app.queues.enqueue('idle', tasks.hold, [label], { deduplicationId: key });
    return { id: handle.workflowId, queue: 'idle' };
  }
  if (kind === 'window') {
    const handle = await app.queues.enqueue('live', tasks.hold, [label, 'return'], {
      deduplicationId: key,
      deduplicationWindowMs: 3_600_000,
    });
    await handle.getResult();
    return { id: handle.workflowId, queue: 'live' };
  }
  const handle = await app.queues.enqueue('live', tasks.hold, [label, kind === 'waiting' ? 'sleep' : 'block'], {
    deduplicationId: key,
  });
  const status = kind === 'waiting' ? 'WAITING' : 'PENDING';
  await waitFor(async () => (await statusOf(handle.workflowId)) === status, { what: `the holder to be ${status}` });
  return { id: handle.workflowId, queue: 'live' };
}

describe.each(POLICIES)('%s', (name, policy, expected) => {
  it.each<Holder>(['queued', 'running', 'waiting', 'window'])('against a %s holder', async (kind) => {
    const key = `${name.replace(/\W+/g, '-')}-${kind}`;
    const holder = await holderOf(kind, key);
    const before = await statusOf(holder.id);
    let outcome: Outcome;
    let workflowId: string | undefined;
    try {
      const handle = await app.queues.enqueue(holder.queue, tasks.hold, [`${key}-dup`], {
        ...policy,
        deduplicationId: key,
      });
      workflowId = handle.workflowId;
      if (handle.workflowId === holder.id) {
        const { rows } = await pool.query(
          `SELECT inputs::text AS inputs,
                  (SELECT array_agg(message::text) FROM "${schema}".workflow_messages
                   WHERE workflow_id = $1 AND topic = $2) AS messages
           FROM ${view} WHERE workflow_id = $1`,
          [holder.id, DUPLICATE_TOPIC],
        );
        const duplicate = JSON.stringify([`${key}-dup`]);
        outcome = rows[0].inputs === duplicate ? 'replaced' : rows[0].messages?.includes(duplicate) ? 'sent' : 'holder';
      } else {
        const after = await statusOf(holder.id);
        outcome = after === 'CANCELLED' && before !== 'CANCELLED' ? 'superseded' : 'follow-up';
        expect(handle.created).toBe(true);
      }
    } catch (error) {
      outcome = (error as Error).name as Outcome;
    }
    expect(outcome).toBe(expected[kind]);

    if (outcome === 'superseded') {
      await expect((await app.queues.retrieve(holder.id)).getStatus()).resolves.toMatchObject({
        supersededBy: workflowId,
      });
    }
    if (outcome === 'follow-up') {
      const { rows } = await pool.query(`SELECT next_deduplication_id FROM ${view} WHERE workflow_id = $1`, [
        workflowId,
      ]);
      expect(rows[0].next_deduplication_id).toBe(key);
    }
    if (outcome === 'QueueDeduplicatedError' || outcome === 'holder' || outcome === 'sent')
      expect(await statusOf(holder.id)).toBe(before);
    await app.queues.cancelMany({ deduplicationIds: [key] });
  });
});
