/**
 * The dashboard behind an application that grants CORS with credentials to any origin
 * (`enableCors({ origin: true, credentials: true })`): a page of another site, in a real browser, cannot make the
 * operator's browser cancel a workflow; the dashboard's own page can, and so can clients that are not browsers, and
 * an origin listed in `allowedOrigins`. Every action is judged the same way (one check for all of them).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { INestApplication } from '@nestjs/common';
import { DedupQueueDashboardModule, QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { Browser, Page, chromium } from 'playwright-core';
import request from 'supertest';
import { startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { SYSTEM_TOOLS, describeWithTools } from './support/system-tools';

const REPORT = 'DashboardTasks.report';
const ADMIN_CONSOLE = 'https://admin.example.com';

describeWithTools(['chromium'], 'dashboard actions from another origin', () => {
  const schema = uniqueSchema('dash_origin');
  let pool: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let dashboardUrl: string;
  let foreign: Server;
  let foreignUrl: string;
  let browser: Browser;
  let page: Page;

  const statusInDb = async (id: string) =>
    (await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [id])).rows[0]?.status;
  const held = async () => (await queues.enqueue('held', REPORT, ['x'])).workflowId;

  beforeAll(async () => {
    pool = testPool();
    const started = await startDashboardApp(schema, { allowedOrigins: [ADMIN_CONSOLE] }, 'express', (nest) =>
      nest.enableCors({ origin: true, credentials: true }),
    );
    app = started.app;
    queues = started.queues;
    await app.listen(0, '127.0.0.1');
    dashboardUrl = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}/queues`;
    foreign = createServer((_, response) => response.end('<!doctype html><title>elsewhere</title>'));
    await new Promise<void>((resolve) => foreign.listen(0, '127.0.0.1', resolve));
    // NOTE: localhost and 127.0.0.1 are different sites to the browser: this page is cross-site to the dashboard.
    foreignUrl = `http://localhost:${(foreign.address() as AddressInfo).port}/`;
    browser = await chromium.launch({
      executablePath: SYSTEM_TOOLS.chromium,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    page = await browser.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => foreign?.close(resolve));
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  /** What a `fetch` from the page currently open answers when it posts `{}` to `url` with the browser's cookies. */
  const postFromPage = (url: string) =>
    page.evaluate(async (target) => {
      const response = await fetch(target, {
        method: 'POST',
        credentials: 'include',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      return { status: response.status, body: (await response.json()) as { message?: string } };
    }, url);

  it("refuses a foreign page's cancel in Chromium, although CORS lets the request through", async () => {
    const id = await held();
    await page.goto(foreignUrl);
    const answer = await postFromPage(`${dashboardUrl}/api/workflows/${id}/cancel`);
    expect(answer.status).toBe(403);
    expect(answer.body.message).toMatch(/refused from a page of another origin.*allowedOrigins/);
    expect(await statusInDb(id)).toBe('ENQUEUED');
  });

  it("lets the dashboard's own page cancel in Chromium", async () => {
    const id = await held();
    await page.goto(dashboardUrl);
    const answer = await postFromPage(`${dashboardUrl}/api/workflows/${id}/cancel`);
    expect(answer).toEqual({ status: 200, body: { workflowId: id, status: 'CANCELLED' } });
  });

  const port = () => new URL(dashboardUrl).port;
  it.each<[string, number, () => Record<string, string>]>([
    ['a client that is not a browser (no Origin, no Sec-Fetch-Site)', 200, () => ({})],
    ['a page of another site', 403, () => ({ origin: 'http://evil.example', 'sec-fetch-site': 'cross-site' })],
    ['a page of a sibling subdomain', 403, () => ({ origin: 'http://a.example', 'sec-fetch-site': 'same-site' })],
    ['a browser that sends Origin only, from another host', 403, () => ({ origin: 'http://evil.example' })],
    ['a sandboxed page (Origin: null)', 403, () => ({ origin: 'null' })],
    ['a browser that sends Origin only, from this host', 200, () => ({ origin: `http://127.0.0.1:${port()}` })],
    ['an origin listed in allowedOrigins', 200, () => ({ origin: ADMIN_CONSOLE, 'sec-fetch-site': 'cross-site' })],
  ])('answers %s with %i', async (_, status, headers) => {
    const id = await held();
    await request(app.getHttpServer())
      .post(`/queues/api/workflows/${id}/cancel`)
      .set({ 'content-type': 'application/json', ...headers() })
      .send({})
      .expect(status);
    expect(await statusInDb(id)).toBe(status === 200 ? 'CANCELLED' : 'ENQUEUED');
  });

  it('judges every action alike: a foreign pause, resume of limits, bulk cancel and rerun are refused', async () => {
    const foreignHeaders = { 'content-type': 'application/json', origin: 'http://evil.example' };
    const id = await held();
    const server = app.getHttpServer();
    await request(server).post('/queues/api/queues/held/pause').set(foreignHeaders).send({}).expect(403);
    await request(server)
      .patch('/queues/api/queues/held/limits')
      .set(foreignHeaders)
      .send({ concurrency: 1 })
      .expect(403);
    await request(server)
      .post('/queues/api/workflows/cancel-matching')
      .set(foreignHeaders)
      .send({ queueName: 'held' })
      .expect(403);
    await request(server).post(`/queues/api/workflows/${id}/rerun`).set(foreignHeaders).send({}).expect(403);
    await expect(queues.getQueueSettings('held')).resolves.toMatchObject({ paused: false });
    expect(await statusInDb(id)).toBe('ENQUEUED');
  });

  it('refuses an allowedOrigins entry that is not an origin, at boot', () => {
    expect(() => DedupQueueDashboardModule.forRoot({ allowedOrigins: ['https://admin.example.com/path'] })).toThrow(
      /`allowedOrigins` holds "https:\/\/admin\.example\.com\/path"; give an origin/,
    );
  });
});
