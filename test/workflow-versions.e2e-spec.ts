/**
 * Workflow versions (issue 31, items 1-3; issue 35, item 4): each run records the version it was enqueued with, a
 * worker claims only the names and versions its process registers (in the claim's own statement), one process runs
 * several versions of a name side by side, renames keep old runs running (`aliases`), and runs that no live executor
 * would claim are never stranded silently: `listVersions()`, the health indicator, a metric, a log line and the 409
 * message say so. An SQL enqueue refuses a name no process ever registered.
 */
import { Injectable, Logger } from '@nestjs/common';
import {
  DedupQueueConfigurationError,
  DedupQueueHealthIndicator,
  QueueDeduplicatedError,
  Workflow,
  workflowContext,
} from 'nest-dedup-queue';
import { ExecutorStore, QueueDatabase, WorkflowClaimer, WorkflowVersionsMonitor } from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { Registry } from 'prom-client';
import { DataSource } from 'typeorm';
import { CapturingLogger } from './support/capturing-logger';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { syncReadyRows } from './support/ready-rows';

/** An old build: version 1 of `Orders.fulfil` (the default version), and an unrelated workflow. */
@Injectable()
class OrdersV1 {
  @Workflow({ name: 'Orders.fulfil' })
  async fulfil(orderId: string): Promise<string> {
    return `v1 ${orderId} (recorded as version ${workflowContext().version})`;
  }

  @Workflow({ name: 'Orders.report' })
  async report(): Promise<string> {
    return 'report of the old build';
  }
}

/** A new build: version 2 of `Orders.fulfil`, and the unrelated workflow edited (same version). */
@Injectable()
class OrdersV2 {
  @Workflow({ name: 'Orders.fulfil', version: 2 })
  async fulfil(orderId: string): Promise<string> {
    return `v2 ${orderId}`;
  }

  @Workflow({ name: 'Orders.report' })
  async report(): Promise<string> {
    return 'report of the new build';
  }
}

/** One process that runs both versions side by side. */
@Injectable()
class OrdersBoth {
  @Workflow({ name: 'Orders.fulfil' })
  async fulfilV1(orderId: string): Promise<string> {
    return `v1 ${orderId}`;
  }

  @Workflow({ name: 'Orders.fulfil', version: 2 })
  async fulfilV2(orderId: string): Promise<string> {
    return `v2 ${orderId} (recorded as version ${workflowContext().version})`;
  }
}

/** The old name of a renamed workflow, as an old build has it. */
@Injectable()
class PaymentsBeforeRename {
  @Workflow()
  async charge(amount: number): Promise<string> {
    throw new Error(`the old build never runs it here (${amount})`);
  }
}

/** The renamed workflow: runs recorded under its old name run on it. */
@Injectable()
class Billing {
  @Workflow({ aliases: ['PaymentsBeforeRename.charge'] })
  async charge(amount: number): Promise<string> {
    return `charged ${amount} as ${workflowContext().workflowName}`;
  }
}

describe('workflow versions', () => {
  const schema = uniqueSchema('versions');
  const registry = new Registry();
  let pool: Pool;
  const apps: QueueApp[] = [];
  const start = async (...args: Parameters<typeof startQueueApp>) => {
    const app = await startQueueApp({ pollIntervalMs: 100, leaseMs: 2000, ...args[0] }, args[1]);
    apps.push(app);
    return app;
  };
  const stop = async (app: QueueApp) => {
    apps.splice(apps.indexOf(app), 1);
    await app.close();
  };
  const row = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT workflow_name, workflow_version, status, attempts FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    for (const app of apps.splice(0).reverse()) await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs two versions of one name side by side in one process: an enqueue records the highest unless told', async () => {
    const both = await start({ schema, executorId: 'both' }, [OrdersBoth]);
    const latest = await both.queues.enqueue<string>('tasks', 'Orders.fulfil', ['o1']);
    expect(await latest.getResult({ timeoutMs: 10_000 })).toBe('v2 o1 (recorded as version 2)');
    expect((await latest.getStatus()).version).toBe(2);
    // A method reference names the workflow, not a version: it too takes the highest.
    const byReference = await both.queues.enqueue('tasks', both.get(OrdersBoth).fulfilV1, ['o2']);
    expect(await byReference.getResult({ timeoutMs: 10_000 })).toMatch(/^v2 o2/);
    const pinned = await both.queues.enqueue<string>('tasks', 'Orders.fulfil', ['o3'], { version: 1 });
    expect(await pinned.getResult({ timeoutMs: 10_000 })).toBe('v1 o3');
    expect(await row(pinned.workflowId)).toMatchObject({ workflow_name: 'Orders.fulfil', workflow_version: 1 });
    const versions = await both.queues.listVersions();
    expect(versions.filter((v) => v.workflowName === 'Orders.fulfil')).toEqual([
      { workflowName: 'Orders.fulfil', version: 1, unfinished: 0, executors: 1 },
      { workflowName: 'Orders.fulfil', version: 2, unfinished: 0, executors: 1 },
    ]);
    await expect(both.queues.enqueue('tasks', 'Orders.fulfil', ['x'], { version: 0 })).rejects.toThrow(
      /options.version must be a workflow version/,
    );
    await stop(both);
  });

  it('claims only the names and versions it registers, in the claim statement itself', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
    const database = new QueueDatabase(dataSource, schema, true);
    try {
      await new ExecutorStore(database).register('claim-test', {
        queues: ['tasks'],
        workflows: [{ name: 'Orders.fulfil', version: 1 }],
      });
      await pool.query(
        `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, workflow_version, status, inputs)
         VALUES ('claim-v2', 'other', 'Orders.fulfil', 2, 'ENQUEUED', '["c"]'),
                ('claim-v1', 'other', 'Orders.fulfil', 1, 'ENQUEUED', '["c"]')`,
      );
      await syncReadyRows(pool, schema);
      const claimer = new WorkflowClaimer(database);
      const queue = { name: 'other', workerConcurrency: 10 };
      const first = await claimer.claim({ queue, executorId: 'claim-test', limit: 10, claimKeys: ['1:Orders.fulfil'] });
      expect(first.workflows.map((w) => [w.workflowId, w.version])).toEqual([['claim-v1', 1]]);
      const none = await claimer.claim({ queue, executorId: 'claim-test', limit: 10, claimKeys: ['1:Orders.fulfil'] });
      expect(none.workflows).toEqual([]);
      const second = await claimer.claim({
        queue,
        executorId: 'claim-test',
        limit: 10,
        claimKeys: ['2:Orders.fulfil'],
      });
      expect(second.workflows.map((w) => [w.workflowId, w.version])).toEqual([['claim-v2', 2]]);
      await pool.query(`DELETE FROM "${schema}".workflow_queue WHERE queue_name = 'other'`);
      await new ExecutorStore(database).remove('claim-test');
    } finally {
      await database.close();
    }
  });

  it('leaves a run of a version no live executor registers queued, reports it everywhere, and runs it once one does', async () => {
    const old = await start({ schema, executorId: 'old-build', metrics: { registry } }, [OrdersV1]);
    const unrelated = await old.queues.enqueue<string>('tasks', 'Orders.report', []);
    const waiting = await old.queues.enqueue<string>('tasks', 'Orders.fulfil', ['o4'], {
      version: 2,
      deduplicationId: 'order-o4',
    });
    const later = await old.queues.enqueue<string>('tasks', 'Orders.fulfil', ['o5']);
    // The old build runs what it registers, in queue order; the version-2 run before it stays queued, unclaimed.
    expect(await later.getResult({ timeoutMs: 10_000 })).toBe('v1 o5 (recorded as version 1)');
    expect(await unrelated.getResult({ timeoutMs: 10_000 })).toBe('report of the old build');
    expect(await row(waiting.workflowId)).toMatchObject({ status: 'ENQUEUED', workflow_version: 2, attempts: 0 });

    expect((await old.queues.listVersions()).filter((v) => v.workflowName === 'Orders.fulfil')).toEqual([
      { workflowName: 'Orders.fulfil', version: 1, unfinished: 0, executors: 1 },
      { workflowName: 'Orders.fulfil', version: 2, unfinished: 1, executors: 0 },
    ]);
    const stranded = [{ queueName: 'tasks', workflowName: 'Orders.fulfil', version: 2, count: 1 }];
    const health = old.get(DedupQueueHealthIndicator);
    expect(await health.checkVersions()).toEqual({
      dedup_queue_versions: {
        status: 'down',
        error: '1 unfinished run(s) of workflow versions that no live executor registers',
        strandedRuns: stranded,
      },
    });
    const healthy = await health.isHealthy();
    expect(healthy.dedup_queue.status).toBe('up');
    expect(healthy.dedup_queue.versions).toMatchObject({ status: 'up', strandedRuns: stranded });
    const monitor = old.get(WorkflowVersionsMonitor);
    await monitor.report();
    expect(await registry.getSingleMetricAsString('dedup_queue_stranded_workflows')).toContain(
      'dedup_queue_stranded_workflows{queue="tasks",workflow="Orders.fulfil",version="2"} 1',
    );
    const duplicate = await old.queues
      .enqueue('tasks', 'Orders.fulfil', ['o4 again'], { deduplicationId: 'order-o4' })
      .catch((error: unknown) => error);
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    expect((duplicate as Error).message).toContain(
      'it is a run of "Orders.fulfil" version 2, which no live executor draining the queue registers',
    );
    // NOTE: each app's compile sets Nest's static logger: the capture is set again after one starts.
    const logged = new CapturingLogger();
    Logger.overrideLogger(logged);
    await monitor.check();
    expect(logged.matching(/no live executor registers/)).toEqual([
      { level: 'warn', message: expect.stringContaining('1 of "Orders.fulfil" version 2 in queue "tasks"') as string },
    ]);
    await monitor.check();
    expect(logged.matching(/no live executor registers/)).toHaveLength(1);

    const fresh = await start({ schema, executorId: 'new-build' }, [OrdersV2]);
    expect(await waiting.getResult({ timeoutMs: 10_000 })).toBe('v2 o4');
    expect(await (await fresh.queues.enqueue<string>('tasks', 'Orders.report', [])).getResult()).toMatch(
      /^report of the (old|new) build$/,
    );
    Logger.overrideLogger(logged);
    await monitor.check();
    expect(logged.matching(/No unfinished run is left without a live executor/)).toHaveLength(1);
    expect(await health.checkVersions()).toEqual({ dedup_queue_versions: { status: 'up', strandedRuns: [] } });
    await monitor.report();
    expect(await registry.getSingleMetricAsString('dedup_queue_stranded_workflows')).not.toContain('version="2"');
  });

  it('runs the runs recorded under an old name on the renamed method (aliases)', async () => {
    const oldBuild = await start({ schema, executorId: 'before-rename', worker: false }, [PaymentsBeforeRename]);
    const recorded = await oldBuild.queues.enqueue<string>('tasks', 'PaymentsBeforeRename.charge', [5]);
    expect(await row(recorded.workflowId)).toMatchObject({ workflow_name: 'PaymentsBeforeRename.charge' });
    const renamed = await start({ schema, executorId: 'after-rename' }, [Billing]);
    expect(await recorded.getResult({ timeoutMs: 10_000 })).toBe('charged 5 as PaymentsBeforeRename.charge');
    // Enqueued by its old name in a build that has the rename, it records the new name.
    const byOldName = await renamed.queues.enqueue<string>('tasks', 'PaymentsBeforeRename.charge', [7]);
    expect(await byOldName.getResult({ timeoutMs: 10_000 })).toBe('charged 7 as Billing.charge');
    const names = (await renamed.queues.listVersions()).map((v) => `${v.workflowName} ${v.executors}`);
    expect(names).toEqual(expect.arrayContaining(['Billing.charge 1', 'PaymentsBeforeRename.charge 1']));
  });

  it('refuses at boot two methods of one name and version, and a bad version or alias', async () => {
    @Injectable()
    class Twice {
      @Workflow({ name: 'Twice.run', version: 3 })
      async a(): Promise<void> {}
      @Workflow({ name: 'Twice.run', version: 3 })
      async b(): Promise<void> {}
    }
    @Injectable()
    class BadVersion {
      @Workflow({ version: 1.5 })
      async run(): Promise<void> {}
    }
    @Injectable()
    class BadAlias {
      @Workflow({ aliases: ['BadAlias.run'] })
      async run(): Promise<void> {}
    }
    for (const [provider, message] of [
      [Twice, /Two workflows are named "Twice.run" \(Twice.a and Twice.b\), both at version 3/],
      [BadVersion, /BadVersion.run: @Workflow\(\{ version \}\) must be a positive integer, got 1.5/],
      [BadAlias, /BadAlias.run: @Workflow\(\{ aliases \}\) must be an array of the workflow's former names/],
    ] as const) {
      const error = await startQueueApp({ schema, worker: false }, [provider]).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(DedupQueueConfigurationError);
      expect((error as Error).message).toMatch(message);
    }
  });

  describe('enqueue from SQL', () => {
    const sqlEnqueue = (name: string, more = '') =>
      pool.query<{ workflow_id: string; created: boolean }>(
        `SELECT * FROM "${schema}".enqueue_workflow(queue_name => 'tasks', workflow_name => $1, args => '["s"]'${more})`,
        [name],
      );

    it('refuses a name no process ever registered (a misspelt one), naming the registered ones', async () => {
      const error = await sqlEnqueue('Orders.fulfl').catch((caught: unknown) => caught);
      expect(error).toMatchObject({
        code: '22023',
        message: 'nest-dedup-queue: no process has registered a workflow named "Orders.fulfl"',
        hint: expect.stringContaining('Orders.fulfil') as string,
      });
      expect(
        (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows WHERE workflow_name = 'Orders.fulfl'`))
          .rows[0].n,
      ).toBe(0);
    });

    it('records the highest version a live executor registers, or the one given', async () => {
      const [latest] = (await sqlEnqueue('Orders.fulfil')).rows;
      expect(await row(latest.workflow_id)).toMatchObject({ workflow_version: 2 });
      const [pinned] = (await sqlEnqueue('Orders.fulfil', ', workflow_version => 1')).rows;
      expect(await row(pinned.workflow_id)).toMatchObject({ workflow_version: 1 });
      await waitFor(async () => (await row(pinned.workflow_id)).status === 'SUCCESS', { what: 'the pinned run' });
      await expect(sqlEnqueue('Orders.fulfil', ', workflow_version => 0')).rejects.toMatchObject({ code: '22023' });
    });

    it('accepts any name while an executor of an older release (which does not say what it runs) is live', async () => {
      await pool.query(
        `INSERT INTO "${schema}".executors (executor_id, hostname, pid) VALUES ('release-1.0', 'old-host', 1)`,
      );
      try {
        const [accepted] = (await sqlEnqueue('Legacy.only')).rows;
        expect(await row(accepted.workflow_id)).toMatchObject({ workflow_name: 'Legacy.only', workflow_version: 1 });
        await pool.query(`DELETE FROM "${schema}".workflow_queue WHERE workflow_id = $1`, [accepted.workflow_id]);
      } finally {
        await pool.query(`DELETE FROM "${schema}".executors WHERE executor_id = 'release-1.0'`);
      }
    });
  });
});
