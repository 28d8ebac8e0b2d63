'use strict';
// A PgBouncer of the bench's own (pool_mode = transaction) on a free port, forwarding every database to the server.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const { execFileSync } = require('node:child_process');
const { sleep } = require('./stats');

const PGBOUNCER = '/usr/sbin/pgbouncer';

function freePort() {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Starts PgBouncer in front of the server of `serverUrl`; `url(database)` reaches a database through it. */
async function startPgBouncer(serverUrl) {
  if (!fs.existsSync(PGBOUNCER)) throw new Error(`${PGBOUNCER} is not installed`);
  const server = new URL(serverUrl);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-pgbouncer-'));
  const port = await freePort();
  fs.writeFileSync(path.join(dir, 'userlist.txt'), '"postgres" ""\n');
  fs.writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${dir}/userlist.txt`,
      'pool_mode = transaction',
      'max_client_conn = 500',
      'default_pool_size = 20',
      'ignore_startup_parameters = extra_float_digits,options',
      `logfile = ${dir}/pgbouncer.log`,
      `pidfile = ${dir}/pgbouncer.pid`,
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: run it as the postgres OS user when we are root.
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (asRoot) {
    execFileSync('chown', ['-R', 'postgres:postgres', dir]);
    execFileSync('runuser', ['-u', 'postgres', '--', PGBOUNCER, '-d', path.join(dir, 'pgbouncer.ini')]);
  } else {
    execFileSync(PGBOUNCER, ['-d', path.join(dir, 'pgbouncer.ini')]);
  }
  const pidFile = path.join(dir, 'pgbouncer.pid');
  for (let i = 0; i < 50 && !fs.existsSync(pidFile); i++) await sleep(50);
  const pid = Number(fs.readFileSync(pidFile, 'utf8'));
  await sleep(200);
  return {
    pid,
    url(database = 'postgres') {
      return `postgres://${server.username || 'postgres'}@127.0.0.1:${port}/${database}`;
    },
    stop() {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // already gone
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = { startPgBouncer };
