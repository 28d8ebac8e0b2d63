'use strict';
// Forks child.js for one measured role and follows it: IPC messages, its memory from /proc, and its end.
const { fork } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const CHILD = path.join(__dirname, '..', 'child.js');

/** VmRSS and VmHWM (peak RSS) of a live process, in MiB. */
function memoryOf(pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field) => Number((status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm')) || [])[1] || NaN);
    return { rssMiB: kb('VmRSS') / 1024, peakMiB: kb('VmHWM') / 1024 };
  } catch {
    return { rssMiB: NaN, peakMiB: NaN };
  }
}

class Child {
  constructor(spec, { quiet = true } = {}) {
    this.spec = spec;
    this.messages = [];
    this.waiters = [];
    this.exited = false;
    this.stderr = '';
    this.proc = fork(CHILD, [JSON.stringify(spec)], {
      stdio: ['ignore', quiet ? 'ignore' : 'inherit', 'pipe', 'ipc'],
      env: { ...process.env, NODE_ENV: 'production' },
      execArgv: spec.execArgv || [],
    });
    this.proc.stderr.on('data', (chunk) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-20_000);
    });
    this.proc.on('message', (message) => {
      this.messages.push(message);
      this.flush();
    });
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exited = true;
        this.exitCode = code;
        this.exitSignal = signal;
        this.flush();
        resolve();
      });
    });
  }

  get pid() {
    return this.proc.pid;
  }

  memory() {
    return memoryOf(this.proc.pid);
  }

  flush() {
    for (const waiter of [...this.waiters]) {
      const found = this.messages.find((m) => waiter.types.includes(m.type) || m.type === 'error');
      if (found) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        clearTimeout(waiter.timer);
        if (found.type === 'error') waiter.reject(new Error(`${this.spec.module}/${this.spec.role}: ${found.message}`));
        else waiter.resolve(found);
      } else if (this.exited) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        clearTimeout(waiter.timer);
        waiter.reject(
          new Error(
            `${this.spec.module}/${this.spec.role} exited (${this.exitCode ?? this.exitSignal}) before ${waiter.types.join('/')}` +
              (this.stderr ? `\n${this.stderr.trim().split('\n').slice(-15).join('\n')}` : ''),
          ),
        );
      }
    }
  }

  /** The first message of one of `types` (already received or to come); rejects on an error message, exit or timeout. */
  waitFor(types, timeoutMs = 120_000) {
    types = [].concat(types);
    return new Promise((resolve, reject) => {
      const waiter = { types, resolve, reject };
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`${this.spec.module}/${this.spec.role}: no ${types.join('/')} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
      this.flush();
    });
  }

  send(message) {
    if (!this.exited) this.proc.send(message);
  }

  /** Asks a worker to shut down gracefully, then makes sure it is gone. */
  async stop(graceMs = 12_000) {
    if (this.exited) return;
    this.send({ type: 'stop' });
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.exitPromise;
    clearTimeout(timer);
  }

  async kill() {
    if (!this.exited) this.proc.kill('SIGKILL');
    await this.exitPromise;
  }
}

/** Runs a one-shot role to its result. */
async function runRole(spec, timeoutMs) {
  const child = new Child(spec);
  try {
    return await child.waitFor('result', timeoutMs);
  } finally {
    await Promise.race([child.exitPromise, new Promise((r) => setTimeout(r, 3000))]);
    await child.kill();
  }
}

module.exports = { Child, runRole, memoryOf };
