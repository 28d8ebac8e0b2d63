'use strict';
// What the numbers were measured on.
const fs = require('node:fs');
const os = require('node:os');
const { execFileSync } = require('node:child_process');
const { withClient } = require('./pg');

async function machineInfo(adminUrl, redisVersion, repoDir) {
  let cpuModel = 'unknown';
  try {
    cpuModel = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m) || [])[1] || cpuModel;
  } catch {
    // no /proc/cpuinfo: the model stays unknown
  }
  const postgres = await withClient(adminUrl, async (client) => {
    const version = (await client.query('SHOW server_version')).rows[0].server_version.split(' ')[0];
    const settings = {};
    for (const name of ['synchronous_commit', 'fsync', 'shared_buffers', 'max_connections']) {
      settings[name] = (await client.query(`SHOW ${name}`)).rows[0][name];
    }
    return { version, settings };
  });
  const git = (args) => {
    try {
      return execFileSync('git', args, { cwd: repoDir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return null;
    }
  };
  const librarySrcChanged = git(['status', '--porcelain', '--', 'packages/nest-dedup-queue/src']);
  return {
    cpuModel,
    cores: os.cpus().length,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres: postgres.version,
    postgresSettings: postgres.settings,
    redis: redisVersion,
    repoCommit: git(['rev-parse', '--short', 'HEAD']),
    librarySourceUncommittedChanges: librarySrcChanged ? librarySrcChanged.split('\n').length : 0,
  };
}

module.exports = { machineInfo };
