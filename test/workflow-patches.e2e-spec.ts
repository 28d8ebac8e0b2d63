/**
 * Code that changes under running workflows (issue 31, items 4 and 5), in one process whose "deployed code" is
 * switched between runs: a run suspended in `recv` is re-executed by the code deployed when it wakes.
 *
 * - Patches, their whole life: `patched(id)` takes the new branch in a run that reaches it with the patch deployed
 *   (and records a marker), the old branch in a run that recorded the old operation there; `deprecatePatch(id)`
 *   passes over a marker and records nothing; then the call is removed.
 * - A mismatch parks: a re-executed run that meets a different operation at a recorded position is dead-lettered
 *   with a `WorkflowDeterminismError` naming the position and both operations, keeps its key and its child, and
 *   `resume` / `resumeMany` continue it once a fix is deployed; `cancel` ends it and frees its key.
 */
import { Injectable } from '@nestjs/common';
import {
  QueueDeduplicatedError,
  QueueService,
  Step,
  Workflow,
  WorkflowResultTimeoutError,
  deprecatePatch,
  patched,
  recv,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { QueueApp, useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

type Deployed = 'original' | 'patched' | 'deprecated' | 'removed' | 'changed' | 'fixed';

/** The code deployed now: each run is re-executed by the code of the moment it wakes. */
let deployed: Deployed = 'original';

@Injectable()
class Shipping {
  readonly calls: string[] = [];

  constructor(private readonly queues: QueueService) {}

  @Step()
  async pack(id: string): Promise<string> {
    this.calls.push(`pack ${id}`);
    return `packed ${id}`;
  }

  @Step()
  async label(id: string): Promise<string> {
    this.calls.push(`label ${id}`);
    return `paper label ${id}`;
  }

  @Step()
  async qrLabel(id: string): Promise<string> {
    this.calls.push(`qr ${id}`);
    return `qr label ${id}`;
  }

  @Workflow()
  async part(id: string): Promise<string> {
    return `part of ${id}`;
  }

  /** 0 pack, 1 a child, 2-3 recv "go", then the label (with its patch), then recv "ship" and the end. */
  @Workflow()
  async send(id: string): Promise<string> {
    await this.pack(id);
    await this.queues.enqueue('tasks', this.part, [id]);
    await recv('go', { timeoutMs: Infinity });
    let label: string;
    switch (deployed) {
      case 'original':
        label = await this.label(id);
        break;
      case 'patched':
      case 'fixed':
        label = (await patched('qr-labels')) ? await this.qrLabel(id) : await this.label(id);
        break;
      case 'deprecated':
        await deprecatePatch('qr-labels');
        label = await this.qrLabel(id);
        break;
      case 'removed':
      case 'changed':
        label = await this.qrLabel(id);
        break;
    }
    await recv('ship', { timeoutMs: Infinity });
    return label;
  }
}

describe('patches and parked runs', () => {
  const suite = useQueueApp('patches', { pollIntervalMs: 100 }, [Shipping], { tasks: Shipping });
  let pool: Pool;
  let app: QueueApp;
  let shipping: Shipping;

  const status = async (workflowId: string) => (await (await app.queues.retrieve(workflowId)).getStatus()).status;
  const waiting = (workflowId: string) =>
    waitFor(async () => (await status(workflowId)) === 'WAITING', { what: `${workflowId} to wait in recv` });
  const stepNames = async (workflowId: string) =>
    (
      await pool.query<{ step_name: string }>(
        `SELECT step_name FROM "${suite.schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
        [workflowId],
      )
    ).rows.map((row) => row.step_name);
  const start = async (id: string) => {
    const handle = await app.queues.enqueue('tasks', shipping.send, [id], {
      workflowId: id,
      deduplicationId: `key-${id}`,
    });
    await waiting(id);
    return handle;
  };
  const goOn = async (id: string, topic: 'go' | 'ship') => {
    await app.queues.send(id, true, { topic });
  };
  /** Starts a run under the code deployed now and lets it print its label: it then waits for "ship". */
  const startPastLabel = async (id: string, label = 'Shipping.label') => {
    await start(id);
    await goOn(id, 'go');
    await waitFor(async () => (await stepNames(id)).includes(label) && (await status(id)) === 'WAITING', {
      what: `${id} to print its label`,
    });
  };

  beforeAll(() => {
    ({ pool, app, tasks: shipping } = suite);
  });

  it('lives a patch through: add it, deploy, old runs keep the old branch, deprecate, remove', async () => {
    deployed = 'original';
    await startPastLabel('old');
    await start('before');

    deployed = 'patched';
    await goOn('before', 'go');
    await waitFor(async () => (await stepNames('before')).includes('Shipping.qrLabel'));
    await goOn('old', 'ship');
    // The old run recorded the old operation where the patch now is: it keeps the old branch, replayed.
    expect(await (await app.queues.retrieve<string>('old')).getResult({ timeoutMs: 10_000 })).toBe('paper label old');
    expect(shipping.calls.filter((call) => call === 'label old')).toHaveLength(1);
    expect(await stepNames('old')).toEqual([
      'Shipping.pack',
      'enqueue Shipping.part',
      'recv deadline',
      'recv',
      'Shipping.label',
      'recv deadline',
      'recv',
    ]);
    expect((await stepNames('before')).slice(4, 6)).toEqual(['patch qr-labels', 'Shipping.qrLabel']);

    // "Is any run without the patch left?": unfinished runs that passed the patch's position without its marker.
    const withoutPatch = async () =>
      (
        await pool.query(
          `SELECT count(*)::int AS n FROM "${suite.schema}".workflows AS w
           WHERE w.workflow_name = 'Shipping.send' AND w.status IN ('ENQUEUED', 'PENDING', 'WAITING')
             AND EXISTS (SELECT 1 FROM "${suite.schema}".steps s WHERE s.workflow_id = w.workflow_id AND s.step_index = 4)
             AND NOT EXISTS (SELECT 1 FROM "${suite.schema}".steps s
                             WHERE s.workflow_id = w.workflow_id AND s.step_name = 'patch qr-labels')`,
        )
      ).rows[0].n;
    expect(await withoutPatch()).toBe(0);

    deployed = 'deprecated';
    await start('after');
    await goOn('after', 'go');
    await goOn('before', 'ship');
    expect(await (await app.queues.retrieve<string>('before')).getResult({ timeoutMs: 10_000 })).toBe(
      'qr label before',
    );
    expect(shipping.calls.filter((call) => call === 'qr before')).toHaveLength(1);
    await waitFor(async () => (await stepNames('after')).includes('Shipping.qrLabel'));
    expect((await stepNames('after')).slice(4, 5)).toEqual(['Shipping.qrLabel']);

    deployed = 'removed';
    await goOn('after', 'ship');
    expect(await (await app.queues.retrieve<string>('after')).getResult({ timeoutMs: 10_000 })).toBe('qr label after');
  });

  it('parks a run that meets a changed operation: dead-lettered with the positions, key and child kept', async () => {
    deployed = 'original';
    await startPastLabel('parked');
    const parkedHandle = await app.queues.retrieve<string>('parked');

    deployed = 'changed';
    await goOn('parked', 'ship');
    const parked = await waitFor(
      async () => {
        const current = await parkedHandle.getStatus();
        return current.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' ? current : undefined;
      },
      { what: 'the run to be parked' },
    );
    expect(parked.error).toMatchObject({
      name: 'WorkflowDeterminismError',
      fields: { stepIndex: 4, recordedStep: 'Shipping.label', calledStep: 'Shipping.qrLabel' },
    });
    expect(parked.error?.message).toContain(
      'called step "Shipping.qrLabel" as step #4, but "Shipping.label" was recorded there',
    );
    const duplicate = await app.queues
      .enqueue('tasks', shipping.send, ['again'], { deduplicationId: 'key-parked' })
      .catch((error: unknown) => error);
    expect(duplicate).toMatchObject({ existingWorkflowId: 'parked' });
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    const child = await app.queues.retrieve<string>('parked-1');
    expect(await child.getResult({ timeoutMs: 10_000 })).toBe('part of parked');
    expect((await child.getStatus()).parentWorkflowId).toBe('parked');
    await expect(parkedHandle.getResult({ timeoutMs: 200 })).rejects.toBeInstanceOf(WorkflowResultTimeoutError);
    expect(shipping.calls.filter((call) => call === 'qr parked')).toEqual([]);

    deployed = 'fixed';
    await app.queues.resume('parked');
    expect(await parkedHandle.getResult({ timeoutMs: 10_000 })).toBe('paper label parked');
    expect(shipping.calls.filter((call) => call.endsWith(' parked'))).toEqual(['pack parked', 'label parked']);
    expect(
      await app.queues.enqueue('tasks', shipping.send, ['again'], {
        deduplicationId: 'key-parked',
        workflowId: 'next',
      }),
    ).toMatchObject({ workflowId: 'next', created: true });
    await app.queues.cancel('next');
  });

  it('continues parked runs with resumeMany, and ends one with cancel, freeing its key', async () => {
    deployed = 'original';
    for (const id of ['bulk-1', 'bulk-2', 'dropped']) await startPastLabel(id);
    deployed = 'changed';
    for (const id of ['bulk-1', 'bulk-2', 'dropped']) await goOn(id, 'ship');
    for (const id of ['bulk-1', 'bulk-2', 'dropped']) {
      await waitFor(async () => (await status(id)) === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', { what: `${id} parked` });
    }
    expect(await app.queues.cancel('dropped')).toBe('CANCELLED');
    expect(
      await app.queues.enqueue('tasks', shipping.part, ['x'], {
        deduplicationId: 'key-dropped',
        workflowId: 'took-key',
      }),
    ).toMatchObject({ created: true });

    deployed = 'fixed';
    expect(await app.queues.resumeMany({ workflowIds: ['bulk-1', 'bulk-2'] })).toEqual([
      { workflowId: 'bulk-1', outcome: 'resumed' },
      { workflowId: 'bulk-2', outcome: 'resumed' },
    ]);
    for (const id of ['bulk-1', 'bulk-2']) {
      expect(await (await app.queues.retrieve<string>(id)).getResult({ timeoutMs: 10_000 })).toBe(`paper label ${id}`);
    }
  });

  it('forks a parked run from the position that mismatched: the fork takes its key and runs the new code', async () => {
    deployed = 'original';
    await startPastLabel('to-fork');
    deployed = 'changed';
    await goOn('to-fork', 'ship');
    await waitFor(async () => (await status('to-fork')) === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', { what: 'parked' });
    const fork = await app.queues.fork('to-fork');
    expect(fork.workflowId).toBe('to-fork-fork-4');
    const holder = await app.queues
      .enqueue('tasks', shipping.part, ['x'], { deduplicationId: 'key-to-fork' })
      .catch((error: unknown) => error);
    expect(holder).toMatchObject({ existingWorkflowId: 'to-fork-fork-4' });
    await waiting('to-fork-fork-4');
    await goOn('to-fork-fork-4', 'ship');
    expect(await fork.getResult({ timeoutMs: 10_000 })).toBe('qr label to-fork');
    expect(await status('to-fork')).toBe('MAX_RECOVERY_ATTEMPTS_EXCEEDED');
  });
});
