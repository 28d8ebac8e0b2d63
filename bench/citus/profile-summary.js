'use strict';
/*
 * node bench/citus/profile-summary.js <a.cpuprofile> [<b.cpuprofile> ...] [--jobs N] [--top N] [--by file]:
 * each profile's sampled time per function (self time), in µs per job when --jobs is given, the idle samples apart;
 * `--by file` sums by the function's package or file instead.
 */
const { readFileSync } = require('node:fs');

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  if (at < 0) return fallback;
  const [value] = args.splice(at, 2).slice(1);
  return value;
};
const jobs = Number(option('--jobs', 0));
const top = Number(option('--top', 30));
const by = option('--by', 'function');

const where = (url) => {
  const match = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (match) return match[1];
  if (url.startsWith('node:')) return 'node';
  return url.replace(/^.*\/(packages|bench|test)\//, '$1/') || '(native)';
};

for (const file of args) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    const node = nodes.get(profile.samples[i]);
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const { functionName, url, lineNumber } = node.callFrame;
    const key =
      by === 'file' ? where(url) : `${functionName || '(anonymous)'} ${where(url)}${url ? `:${lineNumber + 1}` : ''}`;
    self.set(key, (self.get(key) ?? 0) + dt);
  }
  const idle = self.get('(idle) (native)') ?? 0;
  const total = [...self.values()].reduce((sum, value) => sum + value, 0);
  const scale = (us) => (jobs ? `${(us / jobs).toFixed(1)} µs/job` : `${(us / 1000).toFixed(1)} ms`);
  console.log(`${file}: ${scale(total - idle)} busy, ${scale(idle)} idle`);
  const rows = [...self.entries()].filter(([key]) => key !== '(idle) (native)').sort((a, b) => b[1] - a[1]);
  for (const [key, us] of rows.slice(0, top)) console.log(`  ${scale(us).padStart(14)}  ${key}`);
}
