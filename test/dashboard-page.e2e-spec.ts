import type { AddressInfo } from 'node:net';
import { INestApplication, Logger } from '@nestjs/common';
import type { Pool } from 'pg';
import { ScheduleService } from 'nest-dedup-queue';
import { Browser, Page, chromium } from 'playwright-core';
import { DashboardApp, DenyAllGuard, startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { SYSTEM_TOOLS, describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

const REPORT = 'DashboardTasks.report';
const WAITING = 'DashboardTasks.waiting';

async function listen(app: INestApplication): Promise<string> {
  await app.listen(0, '127.0.0.1');
  return `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
}

describeWithTools(['chromium'], 'dashboard page in headless Chromium', () => {
  const schema = uniqueSchema('dash_page');
  let pool: Pool;
  let open: DashboardApp;
  let guarded: DashboardApp;
  let openUrl: string;
  let guardedUrl: string;
  let browser: Browser;
  let page: Page;
  /** Script errors and console errors (a refused inline script or style would show here). */
  const pageErrors: string[] = [];

  const statusInDb = async (id: string) =>
    (await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [id])).rows[0]?.status;

  /** The warnings logged while the two apps booted. */
  let bootWarnings: string[];

  beforeAll(async () => {
    pool = testPool();
    const warned = jest.spyOn(Logger.prototype, 'warn');
    open = await startDashboardApp(schema, { refreshIntervalMs: 300 });
    guarded = await startDashboardApp(schema, { path: '/queues', guards: [DenyAllGuard] });
    bootWarnings = warned.mock.calls.map(([message]) => String(message));
    warned.mockRestore();
    openUrl = await listen(open.app);
    guardedUrl = await listen(guarded.app);
    browser = await chromium.launch({
      executablePath: SYSTEM_TOOLS.chromium,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    page = await browser.newPage({ viewport: { width: 1366, height: 768 } });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error' && !message.text().includes('403')) pageErrors.push(message.text());
    });
  });

  afterAll(async () => {
    await browser?.close();
    open?.tasks.release('page-user');
    await open?.app.close();
    await guarded?.app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('shows every declared queue with its counts per status, refreshed without a reload', async () => {
    await open.queues.enqueue('held', REPORT, ['a']);
    await open.queues.enqueue('held', REPORT, ['b']);
    await page.goto(`${openUrl}/queues`);
    const table = page.getByRole('table', { name: 'Workflows per queue and status' });
    await table.waitFor();
    for (const name of ['work', 'held', 'tenants']) {
      await table.getByRole('rowheader', { name }).waitFor();
    }
    await table.getByRole('link', { name: 'held ENQUEUED: 2' }).waitFor();
    await table.getByRole('link', { name: 'tenants ENQUEUED: 0' }).waitFor();
    await page.evaluate(() => ((globalThis as unknown as { loadedOnce: boolean }).loadedOnce = true));
    await open.queues.enqueue('held', REPORT, ['c']);
    await table.getByRole('link', { name: 'held ENQUEUED: 3' }).waitFor();
    expect(await page.evaluate(() => (globalThis as unknown as { loadedOnce?: boolean }).loadedOnce)).toBe(true);
  });

  it('finds the holder of a deduplication ID by search, shows its steps, cancels it and resumes it', async () => {
    const holder = await open.queues.enqueue('work', WAITING, ['page-user'], { deduplicationId: 'user-42' });
    await waitFor(
      async () =>
        (await pool.query(`SELECT 1 FROM "${schema}".steps WHERE workflow_id = $1`, [holder.workflowId])).rowCount ===
        1,
      { what: 'its first step' },
    );

    await page.goto(`${openUrl}/queues`);
    await page.getByRole('searchbox', { name: 'Search' }).fill('user-42');
    await page.getByRole('button', { name: 'Find' }).click();
    const results = page.getByRole('table', { name: /user-42/ });
    await results.getByRole('link', { name: holder.workflowId }).click();

    await page.getByRole('heading', { name: new RegExp(`Workflow ${holder.workflowId}`) }).waitFor();
    const steps = page.getByRole('table', { name: 'Steps, in the order they ran' });
    await steps.getByRole('rowheader', { name: 'DashboardTasks.load' }).waitFor();
    expect(await steps.getByRole('row').count()).toBe(2);
    expect(await page.getByText('"page-user"').first().isVisible()).toBe(true);

    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: 'Cancel this workflow?' });
    await dialog.waitFor();
    expect(await statusInDb(holder.workflowId)).toBe('PENDING');
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await waitFor(async () => (await statusInDb(holder.workflowId)) === 'CANCELLED', {
      what: 'the workflow to be cancelled',
    });

    await page.getByRole('button', { name: 'Resume', exact: true }).click();
    await waitFor(async () => ['ENQUEUED', 'PENDING'].includes(await statusInDb(holder.workflowId)), {
      what: 'it to be resumed',
    });
    await page.getByRole('button', { name: 'Cancel', exact: true }).waitFor();
    await open.queues.cancel(holder.workflowId);
  });

  it("shows a workflow's streams: each key with its size, state and last values", async () => {
    const streaming = await open.queues.enqueue('work', 'DashboardTasks.streaming', [3]);
    await streaming.getResult({ timeoutMs: 10_000 });
    await page.goto(`${openUrl}/queues#/workflow/${streaming.workflowId}`);
    const streams = page.getByRole('table', { name: 'Streams (writeStream), by key' });
    const tokens = streams.getByRole('row', { name: /^tokens/ });
    await tokens.waitFor();
    expect(await tokens.getByRole('cell').allTextContents()).toEqual([
      '3',
      '12',
      'closed',
      expect.any(String),
      '0: "t0"\n1: "t1"\n2: "t2"',
    ]);
    await streams.getByRole('rowheader', { name: 'status' }).waitFor();
  });

  it("lists a workflow's children, from its page and with the parent filter (page and API)", async () => {
    const parent = await open.queues.enqueue('work', 'DashboardTasks.parent', [3]);
    await parent.getResult({ timeoutMs: 10_000 });
    const children = (await open.queues.list({ parentWorkflowId: parent.workflowId })).map((child) => child.workflowId);
    expect(children).toHaveLength(3);
    const api = await fetch(`${openUrl}/queues/api/workflows?parentWorkflowId=${parent.workflowId}`);
    expect(api.status).toBe(200);
    const page1 = (await api.json()) as { workflows: Array<{ workflowId: string; parentWorkflowId: string }> };
    expect(page1.workflows.map((row) => row.workflowId).sort()).toEqual([...children].sort());
    expect(page1.workflows.every((row) => row.parentWorkflowId === parent.workflowId)).toBe(true);

    await page.goto(`${openUrl}/queues#/workflow/${parent.workflowId}`);
    await page.getByRole('link', { name: 'List them with their statuses' }).click();
    const list = page.getByRole('table', { name: `Workflows enqueued by ${parent.workflowId} (in any queue)` });
    for (const child of children) await list.getByRole('link', { name: child }).waitFor();
    expect(await list.getByRole('row').count()).toBe(1 + children.length);

    await page.goto(`${openUrl}/queues#/queue/held`);
    await page.getByText('Filters', { exact: true }).click();
    await page.getByLabel('Parent workflow ID').fill(parent.workflowId);
    await page.getByRole('button', { name: 'Apply filters' }).click();
    const filtered = page.getByRole('table', { name: 'Workflows of held' });
    for (const child of children) await filtered.getByRole('link', { name: child }).waitFor();
    await waitFor(async () => (await filtered.getByRole('row').count()) === 1 + children.length, {
      what: 'the filtered list to show the children only',
    });
  });

  it('retries a failed workflow from its failed step, one or all matching, and shows the versions in flight', async () => {
    const failed = await open.queues.enqueue('work', 'DashboardTasks.broken', ['page-fork']);
    await waitFor(async () => (await statusInDb(failed.workflowId)) === 'ERROR', { what: 'the workflow to fail' });
    await page.goto(`${openUrl}/queues#/workflow/${failed.workflowId}`);
    await page.getByText('DashboardTasks.broken (version 1)').waitFor();
    await page.getByRole('button', { name: 'Retry from the failed step' }).click();
    const forkId = `${failed.workflowId}-fork-1`;
    await page.getByRole('heading', { name: new RegExp(`Workflow ${forkId}`) }).waitFor();
    await page.getByRole('link', { name: failed.workflowId }).waitFor();
    expect(
      (await pool.query(`SELECT forked_from FROM "${schema}".workflows WHERE workflow_id = $1`, [forkId])).rows,
    ).toEqual([{ forked_from: failed.workflowId }]);

    const another = await open.queues.enqueue('work', 'DashboardTasks.broken', ['page-fork-2']);
    await waitFor(async () => (await statusInDb(another.workflowId)) === 'ERROR', { what: 'the second to fail' });
    await page.goto(`${openUrl}/queues#/queue/work?status=ERROR`);
    await page.getByRole('button', { name: 'Retry all matching from their failed step' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Confirm' }).click();
    await waitFor(
      async () =>
        (
          await pool.query(`SELECT 1 FROM "${schema}".workflows WHERE workflow_id = $1`, [
            `${another.workflowId}-fork-1`,
          ])
        ).rowCount === 1,
      { what: 'the matching ones to be forked' },
    );

    await page.goto(`${openUrl}/queues#/versions`);
    const versions = page.getByRole('table', { name: 'Runs in flight per workflow version' });
    await versions.getByRole('rowheader', { name: 'DashboardTasks.broken' }).waitFor();
  });

  it('keeps the workflow when the confirmation is dismissed', async () => {
    const queued = await open.queues.enqueue('held', REPORT, ['keep']);
    await page.goto(`${openUrl}/queues#/workflow/${queued.workflowId}`);
    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Back' }).click();
    await page.getByRole('dialog').waitFor({ state: 'hidden' });
    expect(await statusInDb(queued.workflowId)).toBe('ENQUEUED');
  });

  it('says "Loading…" from the first paint until the first data arrives', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const queuesApi = '**/queues/api/queues';
    await page.route(queuesApi, async (route) => {
      await held;
      await route.continue();
    });
    try {
      await page.goto(`${openUrl}/queues`);
      const loading = page.getByRole('status').filter({ hasText: 'Loading…' });
      await loading.waitFor();
      const table = page.getByRole('table', { name: 'Workflows per queue and status' });
      expect(await table.count()).toBe(0);
      release();
      await table.waitFor();
      await loading.waitFor({ state: 'hidden' });
    } finally {
      release();
      await page.unroute(queuesApi);
    }
  });

  it('lists the schedules with cron, state, next and last run, and pauses, resumes and triggers one', async () => {
    const schedules = open.app.get(ScheduleService);
    await schedules.create({ name: 'nightly-report', cron: '0 3 * * *', workflow: REPORT, queue: 'held' });
    await page.goto(`${openUrl}/queues`);
    await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Schedules' }).click();
    const row = page.getByRole('table', { name: 'Schedules' }).getByRole('row', { name: /nightly-report/ });
    await row.waitFor();
    const cell = (column: number) => row.getByRole('cell').nth(column);
    expect(await cell(0).textContent()).toBe('0 3 * * *');
    expect(await cell(1).textContent()).toBe(REPORT);
    expect(await cell(2).textContent()).toBe('held');
    expect(await cell(3).textContent()).toBe('Active');
    const nextRunAt = (await schedules.get('nightly-report')).nextRunAt as Date;
    expect(await cell(4).textContent()).toBe(
      await page.evaluate((iso) => new Date(iso).toLocaleString(), nextRunAt.toISOString()),
    );
    expect(await cell(5).textContent()).toBe('—');

    await row.getByRole('button', { name: 'Pause nightly-report' }).click();
    await row.getByRole('button', { name: 'Resume nightly-report' }).waitFor();
    expect(await cell(3).textContent()).toBe('Paused');
    expect(await cell(4).textContent()).toBe('—');
    expect((await schedules.get('nightly-report')).paused).toBe(true);

    await row.getByRole('button', { name: 'Resume nightly-report' }).click();
    await row.getByRole('button', { name: 'Pause nightly-report' }).waitFor();
    expect((await schedules.get('nightly-report')).paused).toBe(false);

    await row.getByRole('button', { name: 'Trigger nightly-report' }).click();
    await waitFor(async () => (await schedules.get('nightly-report')).lastWorkflowId !== null, {
      what: 'the triggered run',
    });
    const { lastWorkflowId } = await schedules.get('nightly-report');
    await cell(5).getByRole('link').waitFor();
    expect(await cell(5).getByRole('link').getAttribute('href')).toBe(
      `#/workflow/${encodeURIComponent(lastWorkflowId as string)}`,
    );
    await open.queues.cancel(lastWorkflowId as string);
  });

  it('ran without script errors or content-security-policy refusals', () => {
    expect(pageErrors).toEqual([]);
  });

  it('warns once at boot about the dashboard without guards, and not about the guarded one', () => {
    expect(bootWarnings.filter((line) => line.includes('dashboard'))).toEqual([
      'The dashboard at /queues has no guards: anyone who can reach the application can see, cancel and rerun ' +
        'workflows there. Give DedupQueueDashboardModule.forRoot({ guards: [YourAdminGuard] })',
    ]);
  });

  it('is blocked, page and API, by a guard that refuses', async () => {
    const response = await page.goto(`${guardedUrl}/queues`);
    expect(response?.status()).toBe(403);
    expect(await page.getByRole('searchbox', { name: 'Search' }).count()).toBe(0);
    const api = await page.goto(`${guardedUrl}/queues/api/queues`);
    expect(api?.status()).toBe(403);
    expect(await api?.text()).not.toContain('held');
  });
});
