'use strict';
// The study's own PostgreSQL 15 server (the Debian binaries, run as the `postgres` OS user on a free port), so that
// pg_stat_wal, pg_waldump and the backends' CPU count the study's work and nothing else. Durable settings as a
// production server has them (fsync, full_page_writes, synchronous_commit on), pg_stat_statements loaded, and
// checkpoints only where the study asks for them. The locale is the machine's service's (C.UTF-8).
const path = require('node:path');

const REPO_DIR = path.resolve(__dirname, '..', '..', '..');
const SETTINGS = {
  fsync: 'on',
  full_page_writes: 'on',
  synchronous_commit: 'on',
  shared_buffers: "'128MB'",
  max_connections: '100',
  shared_preload_libraries: "'pg_stat_statements'",
  'pg_stat_statements.track': 'top',
  'pg_stat_statements.max': '2000',
  'pg_stat_statements.track_planning': 'on',
  checkpoint_timeout: "'30min'",
  max_wal_size: "'4GB'",
  log_min_messages: 'warning',
};

async function startStudyServer() {
  require(path.join(REPO_DIR, 'test', 'support', 'swc-register.js'));
  const { launchPostgres, serverPrograms } = require(path.join(REPO_DIR, 'test', 'support', 'postgres-server.ts'));
  const programs = await serverPrograms('debian');
  const server = await launchPostgres(programs, 'storage-study', SETTINGS, async (directory, dataDir) => {
    await directory.run(path.join(programs.binDir, 'initdb'), [
      ...['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8'],
    ]);
  });
  return { url: server.url, dataDir: server.dataDir, binDir: programs.binDir, dispose: () => server.dispose() };
}

module.exports = { startStudyServer, SETTINGS };
