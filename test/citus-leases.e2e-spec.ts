import { ExecutorStore, QueueDatabase, WorkflowClaimer } from 'nest-dedup-queue/testing';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/**
 * On Citus, a claim takes its executor's lease in the queue on the queue's node (`executor_leases`, migration 24),
 * not its row in `executors` on the coordinator: a claim under a missing or expired lease takes nothing, the recovery
 * of a queue waits for the claims holding its expired leases and recovers what they claimed, what an executor leaves
 * as it ends its leases at the next sweep, and the runs of one gone without a trace when a worker starts.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: executor leases by queue', () => {
  const citus = useCitusCluster();
  const schema = uniqueSchema('citus_leases');
  const queue = { name: 'leased', workerConcurrency: 10 };
  const runs = { queues: ['leased'], workflows: [{ name: 'Leases.run', version: 1 }] };
  const lease = { queues: ['leased'], ms: 60_000 };
  let database: QueueDatabase;
  let executors: ExecutorStore;
  let claimer: WorkflowClaimer;

  beforeAll(async () => {
    const module = await citus.boot({ schema, queues: [{ name: 'leased' }], worker: false });
    database = module.get(QueueDatabase);
    executors = new ExecutorStore(database);
    claimer = new WorkflowClaimer(database);
  });

  const enqueue = async (workflowId: string, queueName = queue.name) => {
    await citus.coordinator.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
       VALUES ($1, $2, 'Leases.run', 'ENQUEUED', '[]')`,
      [workflowId, queueName],
    );
    await citus.coordinator.query(
      `INSERT INTO "${schema}".workflow_ready (queue_name, priority, seq, workflow_id, partition_key)
       SELECT queue_name, priority, seq, workflow_id, partition_key FROM "${schema}".workflow_queue
       WHERE queue_name = $2 AND workflow_id = $1`,
      [workflowId, queueName],
    );
  };
  const claim = async (executorId: string, queueName = queue.name) =>
    (
      await claimer.claim({
        queue: { ...queue, name: queueName },
        executorId,
        limit: 10,
        claimKeys: ['1:Leases.run'],
      })
    ).workflows.map((workflow) => workflow.workflowId);
  const expireLeases = (executorId: string) =>
    citus.coordinator.query(
      `UPDATE "${schema}".executor_leases SET expires_at = now() - interval '1 second' WHERE executor_id = $1`,
      [executorId],
    );
  const leaseQueues = async (executorId: string) =>
    (
      await citus.coordinator.query<{ queue_name: string }>(
        `SELECT queue_name FROM "${schema}".executor_leases WHERE executor_id = $1 AND expires_at > now()`,
        [executorId],
      )
    ).rows.map((row) => row.queue_name);

  it('claims nothing in a queue where its lease is missing or expired, though its executor row lives', async () => {
    await executors.register('exec-a', runs);
    await enqueue('a1');
    expect(await claim('exec-a')).toEqual([]);
    await executors.register('exec-a', runs, lease);
    expect(await leaseQueues('exec-a')).toEqual(['leased']);
    expect(await claim('exec-a')).toEqual(['a1']);

    await enqueue('a2');
    await expireLeases('exec-a');
    expect(await claim('exec-a')).toEqual([]);
    expect(await executors.heartbeat('exec-a', lease)).toBe(true);
    expect(await claim('exec-a')).toEqual(['a2']);
  });

  it('tells the heartbeat when a lease in one of its queues is gone, and takes it again at the next registration', async () => {
    await executors.register('exec-d', runs, lease);
    expect(await executors.heartbeat('exec-d', lease)).toBe(true);
    await citus.coordinator.query(`DELETE FROM "${schema}".executor_leases WHERE executor_id = 'exec-d'`);
    expect(await executors.heartbeat('exec-d', lease)).toBe(false);
    await executors.register('exec-d', runs, lease);
    expect(await leaseQueues('exec-d')).toEqual(['leased']);
    await executors.remove('exec-d', lease);
    expect(await leaseQueues('exec-d')).toEqual([]);
  });

  it('recovers a queue only once the claims holding an expired lease committed, what they claimed included', async () => {
    await executors.register('exec-b', runs, lease);
    await enqueue('b1');
    const claiming = await citus.coordinator.connect();
    try {
      await claiming.query('BEGIN');
      const { rows } = await claiming.query(
        `SELECT 1 FROM "${schema}".executor_leases WHERE queue_name = 'leased' AND executor_id = 'exec-b' FOR KEY SHARE`,
      );
      expect(rows).toHaveLength(1);
      await citus.coordinator.query(`DELETE FROM "${schema}".executors WHERE executor_id = 'exec-b'`);
      await expireLeases('exec-b');

      const sweep = executors.recoverExpired(60_000, ['leased']);
      await waitFor(
        async () => {
          for (const index of [0, 1]) {
            const { rows: waiting } = await citus.worker(index).query(
              `SELECT 1 FROM pg_stat_activity
               WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %executor_leases%'`,
            );
            if (waiting.length > 0) return true;
          }
          return false;
        },
        { what: "the recovery's deletion of the expired lease waiting for the claim" },
      );
      await claiming.query(
        `UPDATE "${schema}".workflow_queue
         SET status = 'PENDING', executor_id = 'exec-b', attempts = 1, started_at = now(), updated_at = now()
         WHERE queue_name = 'leased' AND workflow_id = 'b1'`,
      );
      await claiming.query('COMMIT');
      const recovered = await sweep;
      expect(recovered.map(({ workflowId, status }) => ({ workflowId, status }))).toEqual([
        { workflowId: 'b1', status: 'ENQUEUED' },
      ]);
      expect(await leaseQueues('exec-b')).toEqual([]);
      expect(await claim('exec-b')).toEqual([]);
    } finally {
      claiming.release();
    }
  });

  it('recovers when a worker starts the runs of an executor gone without a trace (no lease, no row), not before', async () => {
    await citus.coordinator.query(
      `INSERT INTO "${schema}".executors (executor_id, hostname, pid) VALUES ('old-process', 'h', 1)`,
    );
    await citus.coordinator.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, executor_id,
         attempts, started_at, updated_at)
       VALUES ('o1', 'leased', 'Leases.run', 'PENDING', '[]', 'old-process', 1, now(), now() - interval '1 minute')`,
    );
    expect(await executors.recoverOrphans('leased')).toEqual([]);
    await citus.coordinator.query(`DELETE FROM "${schema}".executors WHERE executor_id = 'old-process'`);
    expect(await executors.recoverExpired(60_000, ['leased'])).toEqual([]);
    expect((await executors.recoverOrphans('leased')).map((workflow) => workflow.workflowId)).toEqual(['o1']);
  });

  it('recovers at the next sweep what an executor left PENDING when it ended its leases', async () => {
    const left = { queues: ['left'], ms: 60_000 };
    await executors.register('exec-c', { ...runs, queues: ['left'] }, left);
    await enqueue('c1', 'left');
    expect(await claim('exec-c', 'left')).toEqual(['c1']);
    expect(await executors.recoverExpired(60_000, ['left'])).toEqual([]);
    await executors.remove('exec-c', left);
    expect(await leaseQueues('exec-c')).toEqual([]);
    expect((await executors.recoverExpired(60_000, ['left'])).map((workflow) => workflow.workflowId)).toEqual(['c1']);
  });
});
