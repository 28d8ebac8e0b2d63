'use strict';
// node bench/dashboard/screenshot.js [route] [file]: a screenshot of the dashboard on the bench schema (seed it first
// with measure.js), in headless Chromium; default: the queues at a glance, saved as docs/dashboard.png. Refreshes the
// completion times of the newest rows first, so that recent throughput shows.
const { chromium } = require('playwright-core');
const { Pool } = require('pg');
const { startDashboardApp } = require('./app');
const { touchRecent } = require('./seed');

const url = process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const route = process.argv[2] ?? '#/';
const file = process.argv[3] ?? 'docs/dashboard.png';

async function main() {
  const schema = process.env.DASHBOARD_SCHEMA || 'bench_dashboard';
  const pool = new Pool({ connectionString: url, max: 1 });
  pool.on('error', () => undefined);
  await touchRecent(pool, schema);
  await pool.end();
  const { app, baseUrl } = await startDashboardApp(url, schema);
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 760 }, locale: 'en-GB', timezoneId: 'UTC' });
    await page.goto(`${baseUrl}${route}`);
    await page.waitForSelector('main h1');
    await page.waitForSelector('table tbody tr');
    await page.waitForTimeout(300);
    const height = await page.evaluate(() => globalThis.document.querySelector('main').getBoundingClientRect().bottom);
    await page.screenshot({ path: file, clip: { x: 0, y: 0, width: 1280, height: Math.min(760, Math.ceil(height)) } });
    console.log(`wrote ${file}`);
  } finally {
    await browser.close();
    await app.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
