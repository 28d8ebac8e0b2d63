import type { AddressInfo } from 'node:net';
import type { INestApplication } from '@nestjs/common';
import type { Pool } from 'pg';
import { Browser, Page, chromium } from 'playwright-core';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { startDemoApp } from './support/demo-app';
import { SYSTEM_TOOLS, describeWithTools } from './support/system-tools';

interface PageState {
  received: number[];
  connections: number;
  state: string;
  answer: string;
}

const stateOf = (page: Page): Promise<PageState> =>
  page.evaluate(() => {
    const page = globalThis as unknown as {
      received: number[];
      connections: number;
      document: { getElementById(id: string): { textContent: string | null } | null };
    };
    return {
      received: [...page.received],
      connections: page.connections,
      state: page.document.getElementById('state')?.textContent ?? '',
      answer: page.document.getElementById('answer')?.textContent ?? '',
    };
  });

/**
 * The demo's streaming page (`GET /answers`, apps/demo/src/answers.*) in headless Chromium: an `EventSource` on the
 * SSE route of a workflow's token stream, a second asker of the same question refused with 409 and following the
 * holder's stream, and a restart of the server in the middle: both browsers reconnect with `Last-Event-ID` and end
 * with every token exactly once.
 */
describeWithTools(['chromium'], 'demo streaming page in headless Chromium', () => {
  const schema = uniqueSchema('demo_stream');
  let pool: Pool;
  let browser: Browser;
  let app: INestApplication | undefined;
  const pageErrors: string[] = [];

  const startOn = async (port: number): Promise<number> => {
    process.env.DEMO_TOKEN_MS = '60';
    app = await startDemoApp(schema, 300);
    await app.listen(port, '127.0.0.1');
    return (app.getHttpServer().address() as AddressInfo).port;
  };

  beforeAll(async () => {
    pool = testPool();
    browser = await chromium.launch({
      executablePath: SYSTEM_TOOLS.chromium,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
  });

  afterAll(async () => {
    delete process.env.DEMO_TOKEN_MS;
    await browser?.close();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('streams the answer, follows it from a 409, and loses and repeats nothing across a server restart', async () => {
    const port = await startOn(0);
    const url = `http://127.0.0.1:${port}/answers`;
    const asker = await browser.newPage();
    const follower = await browser.newPage();
    for (const page of [asker, follower]) page.on('pageerror', (error) => pageErrors.push(error.message));

    await asker.goto(url);
    await asker.getByRole('button', { name: 'Ask' }).click();
    await asker.waitForFunction(() => (globalThis as unknown as { received: number[] }).received.length >= 5);

    await follower.goto(url);
    await follower.getByRole('button', { name: 'Ask' }).click();
    await follower.getByRole('status').filter({ hasText: 'Already being answered: following' }).waitFor();
    await follower.waitForFunction(() => (globalThis as unknown as { received: number[] }).received.length >= 1);

    // The server stops (its running answer finishes first, as at a SIGTERM) and starts again on the same port.
    await app?.close();
    app = undefined;
    const before = await stateOf(asker);
    expect(before.state).not.toBe('Done.');
    await startOn(port);

    for (const page of [asker, follower]) {
      await page.getByRole('status').filter({ hasText: 'Done.' }).waitFor({ timeout: 30_000 });
    }
    const { rows } = await pool.query(
      `SELECT workflow_id, output FROM "${schema}".workflows WHERE workflow_name = 'Answers.answer'`,
    );
    expect(rows).toHaveLength(1);
    const answer = rows[0].output as string;
    const tokens = answer.match(/\S+\s*/g) ?? [];
    for (const page of [asker, follower]) {
      const after = await stateOf(page);
      expect(after.received).toEqual(tokens.map((_, offset) => offset));
      expect(after.answer).toBe(answer);
      expect(after.connections).toBeGreaterThanOrEqual(2);
    }
    expect(pageErrors).toEqual([]);
  });
});
