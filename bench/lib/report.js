'use strict';
// Turns the raw repetitions into medians, a table (text and markdown), the target verdicts and an SVG chart.
const { median } = require('./stats');

const NEST = 'nest-dedup-queue';

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
            ok: okAll(w2),
            problems: problems(w2),
          }
        : null,
      w3: w3.length
        ? {
            p50: median(w3.map((r) => r.p50)),
            p95: median(w3.map((r) => r.p95)),
            p99: median(w3.map((r) => r.p99)),
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

/** The issue's targets for nest-dedup-queue, as ratios measured in this run. */
function evaluateTargets(summary) {
  const nest = summary[NEST];
  const raw1 = summary['raw-sql-1'];
  const raw32 = summary['raw-sql-32'];
  const redis = summary['bullmq-redis'];
  const targets = [];
  const add = (name, value, goal, met, detail) => targets.push({ name, value, goal, met, detail });
  const ratio = (a, b) => (a && b ? a / b : null);
  if (!nest) return targets;
  if (nest.w1) {
    const r = ratio(nest.w1.perSecond, raw1 && raw1.w1 && raw1.w1.perSecond);
    add('W1 ≥ 2× raw single-row INSERT loop', r, 2, r === null ? null : r >= 2, 'ratio');
    const b = ratio(nest.w1.perSecond, redis && redis.w1 && redis.w1.perSecond);
    add('W1 ≥ BullMQ-Redis', b, 1, b === null ? null : b >= 1, 'ratio');
  }
  if (nest.w2) {
    const r = ratio(nest.w2.perSecond, raw32 && raw32.w2 && raw32.w2.perSecond);
    add('W2 ≥ raw batched (32) claim loop', r, 1, r === null ? null : r >= 1, 'ratio');
    const b = ratio(nest.w2.perSecond, redis && redis.w2 && redis.w2.perSecond);
    add('W2 ≥ BullMQ-Redis', b, 1, b === null ? null : b >= 1, 'ratio');
  }
  if (nest.w3) {
    add('W3 p50 ≤ 1.2 ms', nest.w3.p50, 1.2, nest.w3.p50 <= 1.2, 'ms');
    add('W3 p99 ≤ 5 ms', nest.w3.p99, 5, nest.w3.p99 <= 5, 'ms');
  }
  if (nest.w4) add('W4 ≥ 0.8 of W2', nest.w4.ratio, 0.8, nest.w4.ratio === null ? null : nest.w4.ratio >= 0.8, 'ratio');
  if (nest.w5) {
    add('W5 worker RSS flat under a backlog', nest.w5.peakRssMiB, nest.w5.w2PeakRssMiB, nest.w5.flat, 'MiB (backlog peak vs W2 peak)');
  }
  return targets;
}

const fmtInt = (v) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : Math.round(v).toLocaleString('en-US'));
const fmtMs = (v) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : v < 10 ? v.toFixed(2) : v.toFixed(1));
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
      s.w3 ? fmtMs(s.w3.p50) + flag(s.w3) : '—',
      s.w3 ? fmtMs(s.w3.p95) : '—',
      s.w3 ? fmtMs(s.w3.p99) : '—',
      s.w4 ? `${fmtRatio(s.w4.ratio)} (${fmtInt(s.w4.perSecond)}/s)${flag(s.w4)}` : '—',
      w5,
    ];
  });
}

const HEADER = ['system', 'W1 calls/s', 'W2 jobs/s', 'W3 p50 ms', 'W3 p95 ms', 'W3 p99 ms', 'W4 ratio to W2', 'W5 RSS MiB (W2 / backlog)'];

function textTable(systems, summary) {
  const body = rows(systems, summary);
  const widths = HEADER.map((h, i) => Math.max(h.length, ...body.map((r) => String(r[i]).length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ');
  return [line(HEADER), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

function markdownTable(systems, summary) {
  const body = rows(systems, summary);
  return [
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function targetsText(targets) {
  return targets
    .map((t) => {
      const value = t.detail === 'ms' ? `${fmtMs(t.value)} ms` : t.detail === 'ratio' ? `${fmtRatio(t.value)}×` : `${fmtInt(t.value)} vs ${fmtInt(t.goal)} ${t.detail}`;
      const verdict = t.met === null ? 'n/a' : t.met ? 'MET' : 'MISSED';
      return `${verdict.padEnd(6)} ${t.name}: ${value}`;
    })
    .join('\n');
}

function markdownReport({ systems, summary, targets, machine, startedAt, durationS, notes, config }) {
  const lines = [];
  lines.push(`# nest-dedup-queue benchmark: latest run`);
  lines.push('');
  lines.push(`Run ${startedAt}, ${Math.round(durationS)} s end to end, medians of ${config.reps} interleaved repetitions.`);
  lines.push('');
  lines.push(
    `Machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB; ${machine.os}; Node ${machine.node}; ` +
      `PostgreSQL ${machine.postgres} (synchronous_commit ${machine.postgresSettings.synchronous_commit}, ` +
      `shared_buffers ${machine.postgresSettings.shared_buffers}) on the same machine; Redis ${machine.redis || 'n/a'}. ` +
      `Repository at ${machine.repoCommit}${machine.librarySourceUncommittedChanges ? ` with ${machine.librarySourceUncommittedChanges} uncommitted library source change(s)` : ''}.`,
  );
  lines.push('');
  lines.push(markdownTable(systems, summary));
  lines.push('');
  lines.push(
    'W1: enqueue calls/s, 20,000 calls over 2,000 keys, 16 producers, no workers (exactly 2,000 accepted, checked). ' +
      'W2: jobs/s draining 20,000 no-op jobs, one worker process, concurrency 32 (all recorded complete, checked). ' +
      'W3: enqueue-to-start latency, 2,000 jobs at 200/s. W4: W2 with 1,000,000 finished jobs in the table, as a ratio to W2. ' +
      'W5: the worker\'s peak RSS during W2 and on a 100,000-job backlog (* = ran for ' +
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
    out.push(`<text x="${x + labelWidth - 6}" y="${cy + (rowHeight - 8) / 2 + 4}" font-size="11" text-anchor="end">${esc(item.label)}</text>`);
    item.values.forEach((value, k) => {
      const by = cy + k * barHeight;
      if (!Number.isFinite(value)) {
        out.push(`<text x="${x + labelWidth + 4}" y="${by + barHeight - 2}" font-size="10" fill="#888">n/a</text>`);
        return;
      }
      const clipped = value > scaleMax;
      const w = Math.max(1, (Math.min(value, scaleMax) / scaleMax) * plotWidth);
      const fill = item.highlight ? series[k].highlight : series[k].color;
      out.push(`<rect x="${x + labelWidth}" y="${by}" width="${w.toFixed(1)}" height="${barHeight - 2}" fill="${fill}"/>`);
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
    { title: 'W1 dedup storm: enqueue calls/s (higher is better)', items: pick((s) => [s.w1 ? s.w1.perSecond : NaN]), unit: '/s', format: k, series: blue },
    { title: 'W2 drain: jobs/s, concurrency 32 (higher is better)', items: pick((s) => [s.w2 ? s.w2.perSecond : NaN]), unit: '/s', format: k, series: blue },
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

module.exports = { summarize, evaluateTargets, textTable, markdownTable, markdownReport, targetsText, svgChart };
