import type { Pool } from 'pg';

/**
 * How Citus plans a statement, from its `EXPLAIN` and the planner's DEBUG2 messages on the coordinator:
 * - `fast-path router`: one distribution-column value, planned on Citus's fast path ("Distributed planning for a
 *   fast-path router query") and sent whole to the one node that holds it;
 * - `router insert`: `INSERT … VALUES` of one distribution-column value, sent whole to that node;
 * - `delegated function call`: a call of a function distributed by a distribution-column argument, sent whole to
 *   the node that holds that value ("pushing down the function call"), where its statements run;
 * - `router`: one task on one node, but through the full planner (a CTE, a subquery, a join);
 * - `coordinator`: no distributed table in it (a NOTIFY, a reference or coordinator table), run on the coordinator;
 * - `pull to coordinator`, `repartition`: an `INSERT … SELECT` whose rows travel through the coordinator;
 * - `subplan`: a CTE or subquery run first and its result pulled to the coordinator ("Distributed Subplan");
 * - `multi-task`: more than one task (a fan-out over shards).
 */
export type CitusPlanKind =
  | 'fast-path router'
  | 'router insert'
  | 'delegated function call'
  | 'router'
  | 'coordinator'
  | 'pull to coordinator'
  | 'repartition'
  | 'subplan'
  | 'multi-task';

/**
 * The plan kinds a statement of the hot path must have (but for the exceptions the audit lists): on one node without
 * Citus's full planner (`fast-path router`, `router insert`, `delegated function call`), or reading no distributed
 * table (`coordinator`).
 */
export const HOT_PLAN_KINDS: ReadonlySet<CitusPlanKind> = new Set([
  'fast-path router',
  'router insert',
  'delegated function call',
  'coordinator',
]);

/** A statement's plan: its kind, the `EXPLAIN` text and the planner's DEBUG messages. */
export interface CitusPlan {
  kind: CitusPlanKind;
  plan: string;
  debug: string[];
}

/**
 * EXPLAINs `text` with `values` on a connection of `pool` (the coordinator) under `client_min_messages = debug2`,
 * and says how Citus plans it (see `CitusPlanKind`).
 */
export async function explainOnCitus(pool: Pool, text: string, values: unknown[]): Promise<CitusPlan> {
  const client = await pool.connect();
  const debug: string[] = [];
  const onNotice = (notice: { message?: string }) => debug.push(notice.message ?? '');
  client.on('notice', onNotice);
  try {
    await client.query('SET client_min_messages TO debug2');
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) ${text}`, values);
    const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
    return { kind: planKind(text, plan, debug), plan, debug };
  } finally {
    await client.query('RESET client_min_messages').catch(() => undefined);
    client.off('notice', onNotice);
    client.release();
  }
}

function planKind(text: string, plan: string, debug: string[]): CitusPlanKind {
  const messages = debug.join('\n');
  if (/pull to coordinator/i.test(plan) || /pull to coordinator|pulling to coordinator/i.test(messages)) {
    return 'pull to coordinator';
  }
  if (/repartition/i.test(plan)) return 'repartition';
  if (/Distributed Subplan/.test(plan) || /generating subplan/i.test(messages)) return 'subplan';
  const counts = [...plan.matchAll(/Task Count: (\d+)/g)].map((match) => Number(match[1]));
  if (counts.length === 0) return 'coordinator';
  if (counts.length > 1 || counts[0] !== 1) return 'multi-task';
  if (/fast-path router query/i.test(messages)) return 'fast-path router';
  if (/pushing down the function call/i.test(messages)) return 'delegated function call';
  return /^\s*INSERT\b/i.test(text) && /\bVALUES\b/i.test(text) && !/\bSELECT\b/i.test(text)
    ? 'router insert'
    : 'router';
}
