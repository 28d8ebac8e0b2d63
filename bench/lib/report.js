'use strict';
// Turns the raw repetitions into medians, a table (text and markdown), the target verdicts and an SVG chart.
const { median } = require('./stats');

const NEST = 'nest-dedup-queue';

/** Medians of what a drain cost and how its worker started (see workloads/w2-drain.js). */
function costOf(list) {
  const pick = (fn) =>
    median(
      list.map((r) => {
        try {
          return fn(r);
        } catch {
          return null;
        }
      }),
    );
  return {
    workerUsPerJob: pick((r) => r.cpu.workerUsPerJob),
    storeUsPerJob: pick((r) => r.cpu.storeUsPerJob),
    commitsPerJob: pick((r) => r.commitsPerJob),
    statementsPerJob: pick((r) => r.statementsPerJob),
    walBytesPerJob: pick((r) => r.walBytesPerJob),
    readyToFirstClaimMs: pick((r) => r.startup.readyToFirstClaimMs),
    readyToFirstJobMs: pick((r) => r.startup.readyToFirstJobMs),
    forkToReadyMs: pick((r) => r.startup.forkToReadyMs),
  };
}

function drainSummary(list) {
  if (!list.length) return null;
  return {
    perSecond: median(list.map((r) => r.perSecond)),
    reps: list.map((r) => r.perSecond),
    ...costOf(list),
    ok: list.every((r) => r.ok),
    problems: [...new Set(list.flatMap((r) => r.problems || []))],
  };
}

function summarize(systems, runs) {
  const summary = {};
  for (const system of systems) {
    const of = (workload) => (runs[workload] && runs[workload][system.id]) || [];
    const okAll = (list) => (list.length === 0 ? null : list.every((r) => r.ok));
    const problems = (list) => [...new Set(list.flatMap((r) => r.problems || []))];
    const w1 = of('w1');
    const w2 = of('w2');
    const w3 = of('w3');
    const w4 = of('w4');
    const w5 = of('w5');
    const s = {
      w1: w1.length
        ? {
            perSecond: median(w1.map((r) => r.perSecond)),
            producerUsPerCall: median(w1.map((r) => r.producerUsPerCall)),
            commitsPerCall: median(w1.map((r) => r.commitsPerCall)),
            reps: w1.map((r) => r.perSecond),
            capped: w1.some((r) => r.capped),
            ok: okAll(w1),
            problems: problems(w1),
          }
        : null,
      w2: w2.length
        ? {
            perSecond: median(w2.map((r) => r.perSecond)),
            reps: w2.map((r) => r.perSecond),
            peakRssMiB: Math.max(...w2.map((r) => r.peakRssMiB).filter(Number.isFinite)),
            ...costOf(w2),
            ok: okAll(w2),
            problems: problems(w2),
          }
        : null,
      w2stale: drainSummary(of('w2stale')),
      variants: {
        direct: drainSummary(of('w2direct')),
        pgbouncer: drainSummary(of('w2pgbouncer')),
        workers1: drainSummary(of('w2x1')),
        workers2: drainSummary(of('w2x2')),
        workers4: drainSummary(of('w2x4')),
      },
      w3: w3.length
        ? {
            p50: median(w3.map((r) => r.p50)),
            p95: median(w3.map((r) => r.p95)),
            p99: median(w3.map((r) => r.p99)),
            callP50: median(w3.map((r) => r.callP50)),
            reps: w3.map((r) => ({ p50: r.p50, p95: r.p95, p99: r.p99 })),
            ok: okAll(w3),
            problems: problems(w3),
          }
        : null,
      w4: null,
      w5: null,
    };
    if (w4.length) {
      const perSecond = median(w4.map((r) => r.perSecond));
      s.w4 = {
        perSecond,
        reps: w4.map((r) => r.perSecond),
        ratio: s.w2 && s.w2.perSecond && perSecond ? perSecond / s.w2.perSecond : null,
        ok: okAll(w4),
        problems: problems(w4),
      };
    }
    if (w5.length) {
      const r = w5[0];
      const base = s.w2 ? s.w2.peakRssMiB : null;
      s.w5 = {
        ...r,
        w2PeakRssMiB: base,
        flat: base ? r.peakRssMiB <= base * 1.25 || r.peakRssMiB <= base + 40 : null,
      };
    }
    summary[system.id] = s;
  }
  return summary;
}

const ratio = (a, b) => (a && b ? a / b : null);
const rate = (s, w) => (s && s[w] ? s[w].perSecond : null);

/** A list of targets and the ways one is added: as measured, a ratio at least a goal, a value at most theirs. */
function targetList() {
  const targets = [];
  const add = (name, value, goal, met, detail) => targets.push({ name, value, goal, met, detail });
  const atLeast = (name, value, goal = 1) => add(name, value, goal, value === null ? null : value >= goal, 'ratio');
  const atMost = (name, ours, theirs, unit) =>
    add(
      name,
      ours,
      theirs,
      ours == null || theirs == null ? null : ours <= theirs,
      `${unit} vs ${unit === 'ms' ? fmtMs(theirs) : fmtInt(theirs)} ${unit}`,
    );
  return { targets, add, atLeast, atMost };
}

/** Issue 32's targets: the database's work per job against graphile-worker's, W1 against pgbench's. */
function evaluateStorageTargets({ add, atLeast, atMost }, nest, graphile, rawSql, pgbench) {
  if (nest.w2 && graphile?.w2) {
    atMost('Postgres CPU per job (W2) ≤ graphile-worker', nest.w2.storeUsPerJob, graphile.w2.storeUsPerJob, 'µs');
    atMost('WAL bytes per job (W2) ≤ graphile-worker', nest.w2.walBytesPerJob, graphile.w2.walBytesPerJob, 'B');
  }
  if (nest.w1 && pgbench?.w1) atLeast('W1 ≥ 0.8× pgbench', ratio(rate(nest, 'w1'), rate(pgbench, 'w1')), 0.8);
  if (nest.w3) {
    atMost('W3 p50 ≤ graphile-worker', nest.w3.p50, graphile?.w3 ? graphile.w3.p50 : null, 'ms');
    atMost("W3 enqueue call p50 ≤ raw SQL's", nest.w3.callP50, rawSql?.w3 ? rawSql.w3.callP50 : null, 'ms');
  }
  if (nest.w2) {
    const job = nest.w2.readyToFirstJobMs;
    add('start-up: first job ≤ 50 ms after app.init()', job, 50, job === null ? null : job <= 50, 'ms');
  }
}

/** Issue 14's and issue 32's targets for nest-dedup-queue, as ratios measured in this run. */
function evaluateTargets(summary) {
  const nest = summary[NEST];
  const graphile = summary['graphile-worker'];
  const redis = summary['bullmq-redis'];
  const rawSql = summary['raw-sql-32'];
  const pgbench = summary.pgbench;
  const list = targetList();
  const { targets, add, atLeast, atMost } = list;
  if (!nest) return targets;
  if (nest.w1) atLeast('W1 ≥ BullMQ-Redis', ratio(rate(nest, 'w1'), rate(redis, 'w1')));
  if (nest.w2) {
    atLeast('W2 (fresh statistics) ≥ graphile-worker', ratio(rate(nest, 'w2'), rate(graphile, 'w2')));
    atLeast('W2 (fresh statistics) ≥ BullMQ-Redis', ratio(rate(nest, 'w2'), rate(redis, 'w2')));
  }
  if (nest.w2stale) {
    atLeast('W2 (stale statistics) ≥ graphile-worker', ratio(rate(nest, 'w2stale'), rate(graphile, 'w2stale')));
    atLeast('W2 (stale statistics) ≥ BullMQ-Redis', ratio(rate(nest, 'w2stale'), rate(redis, 'w2stale')));
  }
  if (nest.w3) {
    atMost('W3 p50 ≤ BullMQ-Redis', nest.w3.p50, redis && redis.w3 ? redis.w3.p50 : null, 'ms');
    add('W3 p99 ≤ 2.5 ms', nest.w3.p99, 2.5, nest.w3.p99 <= 2.5, 'ms');
  }
  if (nest.w2) {
    const claim = nest.w2.readyToFirstClaimMs;
    const job = nest.w2.readyToFirstJobMs;
    add('start-up: claiming < 30 ms after app.init()', claim, 30, claim === null ? null : claim < 30, 'ms');
    add('start-up: first job < 100 ms after app.init()', job, 100, job === null ? null : job < 100, 'ms');
    const cpu = (s) =>
      s && s.w2 && s.w2.workerUsPerJob !== null && s.w2.storeUsPerJob !== null
        ? s.w2.workerUsPerJob + s.w2.storeUsPerJob
        : null;
    atMost('CPU per job (worker + Postgres) ≤ graphile-worker', cpu(nest), cpu(graphile), 'µs');
    const st = nest.w2.statementsPerJob ?? nest.w2.commitsPerJob;
    add(
      'statements per job < 0.2',
      st,
      0.2,
      st === null ? null : st < 0.2,
      `statements (commits ${fmtRatio3(nest.w2.commitsPerJob)})`,
    );
  }
  if (nest.w4) atLeast('W4 ≥ 0.9 of W2', nest.w4.ratio, 0.9);
  evaluateStorageTargets(list, nest, graphile, rawSql, pgbench);
  if (nest.w5) {
    add(
      'W5 worker RSS flat under a backlog',
      nest.w5.peakRssMiB,
      nest.w5.w2PeakRssMiB,
      nest.w5.flat,
      'MiB (backlog peak vs W2 peak)',
    );
  }
  return targets;
}

const fmtInt = (v) =>
  v === null || v === undefined || !Number.isFinite(v) ? '—' : Math.round(v).toLocaleString('en-US');
const fmtMs = (v) =>
  v === null || v === undefined || !Number.isFinite(v) ? '—' : v < 10 ? v.toFixed(2) : v.toFixed(1);
const fmtRatio3 = (v) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : v.toFixed(3));
const fmtRatio = (v) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : v.toFixed(2));

function rows(systems, summary) {
  return systems.map((system) => {
    const s = summary[system.id];
    const flag = (w) => (w && w.ok === false ? ' ✗' : '');
    const w5 = s.w5
      ? `${fmtInt(s.w2 && s.w2.peakRssMiB)} / ${fmtInt(s.w5.peakRssMiB)}${s.w5.drained ? '' : '*'}`
      : s.w2
        ? `${fmtInt(s.w2.peakRssMiB)} / —`
        : '—';
    return [
      system.label,
      s.w1 ? fmtInt(s.w1.perSecond) + (s.w1.capped ? '†' : '') + flag(s.w1) : '—',
      s.w2 ? fmtInt(s.w2.perSecond) + flag(s.w2) : '—',
      s.w2stale ? fmtInt(s.w2stale.perSecond) + flag(s.w2stale) : '—',
      s.w3 ? fmtMs(s.w3.p50) + flag(s.w3) : '—',
      s.w3 ? fmtMs(s.w3.p95) : '—',
      s.w3 ? fmtMs(s.w3.p99) : '—',
      s.w2
        ? `${s.w2.readyToFirstClaimMs === null ? '' : `${fmtInt(s.w2.readyToFirstClaimMs)} / `}${fmtInt(s.w2.readyToFirstJobMs)}`
        : '—',
      s.w4 ? `${fmtRatio(s.w4.ratio)} (${fmtInt(s.w4.perSecond)}/s)${flag(s.w4)}` : '—',
      w5,
    ];
  });
}

const HEADER = [
  'system',
  'W1 calls/s',
  'W2 jobs/s (fresh stats)',
  'W2 jobs/s (stale stats)',
  'W3 p50 ms',
  'W3 p95 ms',
  'W3 p99 ms',
  'start-up ms (claim / first job)',
  'W4 ratio to W2',
  'W5 RSS MiB (W2 / backlog)',
];

const COST_HEADER = [
  'system',
  'W1 producer CPU µs/call',
  'W1 commits/call',
  'W2 CPU µs/job (worker + store)',
  'W2 commits/job',
  'W2 statements/job',
];

function costRows(systems, summary) {
  return systems.map((system) => {
    const s = summary[system.id];
    return [
      system.label,
      s.w1 ? fmtInt(s.w1.producerUsPerCall) : '—',
      s.w1 ? fmtRatio3(s.w1.commitsPerCall) : '—',
      s.w2 && s.w2.workerUsPerJob !== null ? `${fmtInt(s.w2.workerUsPerJob)} + ${fmtInt(s.w2.storeUsPerJob)}` : '—',
      s.w2 ? fmtRatio3(s.w2.commitsPerJob) : '—',
      s.w2 ? fmtRatio3(s.w2.statementsPerJob) : '—',
    ];
  });
}

/** nest-dedup-queue's W2 variants: direct next to PgBouncer, and 1, 2 and 4 worker processes. */
function variantRows(summary) {
  const v = summary[NEST] && summary[NEST].variants;
  if (!v || !Object.values(v).some(Boolean)) return null;
  const cell = (d) => (d ? fmtInt(d.perSecond) + (d.ok === false ? ' ✗' : '') : '—');
  const cpu = (d) =>
    d && d.workerUsPerJob !== null ? `${fmtInt(d.workerUsPerJob)} + ${fmtInt(d.storeUsPerJob)}` : '—';
  const header = [
    '',
    'direct',
    'through PgBouncer (transaction pooling)',
    '1 worker process',
    '2 worker processes',
    '4 worker processes',
  ];
  const order = [v.direct, v.pgbouncer, v.workers1, v.workers2, v.workers4];
  return [header, ['W2 jobs/s', ...order.map(cell)], ['CPU µs/job (worker + store)', ...order.map(cpu)]];
}

function markdownRows([header, ...body]) {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function textTable(systems, summary) {
  const body = rows(systems, summary);
  const widths = HEADER.map((h, i) => Math.max(h.length, ...body.map((r) => String(r[i]).length)));
  const line = (cells) =>
    cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ');
  return [line(HEADER), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

function markdownTable(systems, summary) {
  return markdownRows([HEADER, ...rows(systems, summary)]);
}

function costTable(systems, summary) {
  return markdownRows([COST_HEADER, ...costRows(systems, summary)]);
}

function targetsText(targets) {
  return targets
    .map((t) => {
      const value =
        t.detail === 'ms'
          ? `${fmtMs(t.value)} ms`
          : t.detail === 'ratio'
            ? `${fmtRatio(t.value)}×`
            : /^(ms|µs|B) vs/.test(t.detail)
              ? `${t.detail.startsWith('ms') ? fmtMs(t.value) : fmtInt(t.value)} ${t.detail}`
              : t.detail.startsWith('statements')
                ? `${fmtRatio3(t.value)} ${t.detail}`
                : `${fmtInt(t.value)} vs ${fmtInt(t.goal)} ${t.detail}`;
      const verdict = t.met === null ? 'n/a' : t.met ? 'MET' : 'MISSED';
      return `${verdict.padEnd(6)} ${t.name}: ${value}`;
    })
    .join('\n');
}

/** The tables of a run: throughput and latency, cost, and nest-dedup-queue's W2 variants. */
function resultTables({ systems, summary, config }) {
  const lines = [markdownTable(systems, summary), '', costTable(systems, summary)];
  const variants = variantRows(summary);
  if (variants) {
    lines.push('');
    lines.push(
      `nest-dedup-queue, W2 (fresh statistics) variants, ${config.variantReps === 1 ? 'one run each' : `medians of ${config.variantReps}`}, ` +
        'direct and PgBouncer interleaved:',
    );
    lines.push('');
    lines.push(markdownRows(variants));
  }
  return lines;
}

/** docs/performance.md's latest results: the tables and the targets of the latest run. */
function readmeSection({ systems, summary, targets, machine, startedAt, durationS, config }) {
  return [
    `Latest full run: ${startedAt.slice(0, 10)}, ${Math.round(durationS)} s, medians of ${config.reps} ` +
      `(stale statistics: ${config.staleReps}); ${machine.cpuModel}, ${machine.cores} cores shared by every process; ` +
      `PostgreSQL ${machine.postgres} (synchronous_commit ${machine.postgresSettings.synchronous_commit}); ` +
      `repository at ${machine.repoCommit}. Definitions and notes: the repository's \`bench/README.md\`, "Latest results".`,
    '',
    ...resultTables({ systems, summary, config }),
    '',
    'Against the targets (issues 14 and 32; ratios within this run):',
    '',
    '```',
    targetsText(targets),
    '```',
  ].join('\n');
}

function markdownReport({ systems, summary, targets, machine, startedAt, durationS, notes, config }) {
  const lines = [];
  lines.push(`# nest-dedup-queue benchmark: latest run`);
  lines.push('');
  lines.push(
    `Run ${startedAt}, ${Math.round(durationS)} s end to end, medians of ${config.reps} interleaved repetitions.`,
  );
  lines.push('');
  lines.push(
    `Machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB; ${machine.os}; Node ${machine.node}; ` +
      `PostgreSQL ${machine.postgres} (synchronous_commit ${machine.postgresSettings.synchronous_commit}, ` +
      `shared_buffers ${machine.postgresSettings.shared_buffers}) on the same machine; Redis ${machine.redis || 'n/a'}. ` +
      `Repository at ${machine.repoCommit}${machine.librarySourceUncommittedChanges ? ` with ${machine.librarySourceUncommittedChanges} uncommitted library source change(s)` : ''}.`,
  );
  lines.push('');
  lines.push(...resultTables({ systems, summary, config }));
  lines.push('');
  lines.push(
    'W1: enqueue calls/s, 20,000 calls over 2,000 keys, 16 producers, no workers (exactly 2,000 accepted, checked). ' +
      'W2: jobs/s draining 20,000 no-op jobs, one worker process, concurrency 32 (all recorded complete, checked), ' +
      `with fresh statistics (ANALYZE after the prefill, as autovacuum gives a running system; medians of ${config.reps}) ` +
      `and stale ones (no ANALYZE: whatever the table's earlier use left; medians of ${config.staleReps}). ` +
      "Start-up: from the worker's boot resolving (for nest-dedup-queue `createApplicationContext`, i.e. `app.init()`) " +
      "to its first claim statement (where the adapter can see it) / to the first job's start, jobs waiting (W2, fresh). " +
      "CPU: utime + stime from /proc over the drain, of the worker process and of the store (the database's client " +
      "backends other than the orchestrator's; redis-server for BullMQ-Redis; plus PgBouncer behind it). Commits: " +
      "pg_stat_database xact_commit + xact_rollback deltas less the orchestrator's own statements (W1: the producer's " +
      'boot included). Statements: every statement the worker sent, boot to shutdown (counted on its pg client; ' +
      'nest-dedup-queue only). ' +
      'W3: enqueue-to-start latency, 2,000 jobs at 200/s. W4: W2 with 1,000,000 finished jobs in the table, as a ratio to W2. ' +
      "W5: the worker's peak RSS during W2 and on a 100,000-job backlog (* = ran for " +
      `${config.w5.maxSeconds} s without draining it). † = the storm was cut short at ${config.w1.maxSeconds} s ` +
      '(rate over the calls made, accepted count checked against the keys called). ✗ = a correctness check failed (see latest.json).',
  );
  lines.push('');
  lines.push('## nest-dedup-queue against the targets');
  lines.push('');
  lines.push('```');
  lines.push(targetsText(targets));
  lines.push('```');
  lines.push('');
  lines.push('## Systems and settings');
  lines.push('');
  for (const system of systems) lines.push(`- **${system.label}**: ${system.settings}`);
  if (notes.length) {
    lines.push('');
    lines.push('## Notes');
    lines.push('');
    for (const note of notes) lines.push(`- ${note}`);
  }
  lines.push('');
  return lines.join('\n');
}

// ---- SVG ----

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function barPanel({ x, y, width, title, items, unit, format, cap, series }) {
  // items: [{ label, values: [v per series] }]
  const labelWidth = 170;
  const barHeight = 11;
  const rowHeight = barHeight * series.length + 8;
  const plotWidth = width - labelWidth - 70;
  const maxValue = Math.max(1e-9, ...items.flatMap((i) => i.values.filter(Number.isFinite)));
  const scaleMax = cap ? Math.min(cap, maxValue) : maxValue;
  const out = [`<text x="${x}" y="${y}" font-size="14" font-weight="bold">${esc(title)}</text>`];
  let cy = y + 14;
  for (const item of items) {
    out.push(
      `<text x="${x + labelWidth - 6}" y="${cy + (rowHeight - 8) / 2 + 4}" font-size="11" text-anchor="end">${esc(item.label)}</text>`,
    );
    item.values.forEach((value, k) => {
      const by = cy + k * barHeight;
      if (!Number.isFinite(value)) {
        out.push(`<text x="${x + labelWidth + 4}" y="${by + barHeight - 2}" font-size="10" fill="#888">n/a</text>`);
        return;
      }
      const clipped = value > scaleMax;
      const w = Math.max(1, (Math.min(value, scaleMax) / scaleMax) * plotWidth);
      const fill = item.highlight ? series[k].highlight : series[k].color;
      out.push(
        `<rect x="${x + labelWidth}" y="${by}" width="${w.toFixed(1)}" height="${barHeight - 2}" fill="${fill}"/>`,
      );
      out.push(
        `<text x="${x + labelWidth + w + 4}" y="${by + barHeight - 2}" font-size="10">${clipped ? '› ' : ''}${esc(format(value))}${unit}</text>`,
      );
    });
    cy += rowHeight;
  }
  if (series.length > 1) {
    let lx = x + labelWidth;
    for (const s of series) {
      out.push(`<rect x="${lx}" y="${cy + 2}" width="10" height="10" fill="${s.color}"/>`);
      out.push(`<text x="${lx + 14}" y="${cy + 11}" font-size="10">${esc(s.name)}</text>`);
      lx += 80;
    }
    cy += 16;
  }
  return { svg: out.join('\n'), height: cy - y };
}

function svgChart(systems, summary, { title, subtitle }) {
  const width = 640;
  const panels = [];
  const pick = (fn) =>
    systems
      .map((s) => ({ label: s.label, highlight: s.id === NEST, values: fn(summary[s.id]) }))
      .filter((item) => item.values.some(Number.isFinite));
  const k = (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : `${Math.round(v)}`);
  const blue = [{ name: '', color: '#8aa4c8', highlight: '#d9534f' }];
  const specs = [
    {
      title: 'W1 dedup storm: enqueue calls/s (higher is better)',
      items: pick((s) => [s.w1 ? s.w1.perSecond : NaN]),
      unit: '/s',
      format: k,
      series: blue,
    },
    {
      title: 'W2 drain: jobs/s, concurrency 32 (higher is better)',
      items: pick((s) => [s.w2 ? s.w2.perSecond : NaN]),
      unit: '/s',
      format: k,
      series: blue,
    },
    {
      title: 'W3 enqueue-to-start latency, ms (lower is better; scale cut at 25 ms)',
      items: pick((s) => (s.w3 ? [s.w3.p50, s.w3.p99] : [NaN, NaN])),
      unit: ' ms',
      format: (v) => (v < 10 ? v.toFixed(2) : v.toFixed(0)),
      cap: 25,
      series: [
        { name: 'p50', color: '#8aa4c8', highlight: '#d9534f' },
        { name: 'p99', color: '#c5d3e6', highlight: '#f0a8a6' },
      ],
    },
  ];
  let y = 70;
  for (const spec of specs) {
    const panel = barPanel({ x: 16, y, width, ...spec });
    panels.push(panel.svg);
    y += panel.height + 26;
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="16" y="24" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="16" y="42" font-size="11" fill="#555">${esc(subtitle)}</text>`,
    ...panels,
    `</svg>`,
  ].join('\n');
}

module.exports = {
  summarize,
  evaluateTargets,
  textTable,
  markdownTable,
  markdownReport,
  readmeSection,
  targetsText,
  svgChart,
};
