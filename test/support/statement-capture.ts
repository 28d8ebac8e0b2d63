import * as pg from 'pg';

/** A statement as sent to Postgres: its text and its parameter values. */
export interface CapturedStatement {
  text: string;
  values: unknown[];
}

/** What `captureStatements` gives: switch `capturing` on and off, read `captured`, `restore` at the end. */
export interface StatementCapture {
  capturing: boolean;
  captured: CapturedStatement[];
  restore(): void;
}

/**
 * Records the statements sent on `pg` (the workspace's one copy, which the library uses) whose text `matches`, while
 * `capturing` is set, by wrapping `Client.prototype.query` in this process.
 */
export function captureStatements(matches: RegExp): StatementCapture {
  const original = pg.Client.prototype.query;
  const state: StatementCapture = {
    capturing: false,
    captured: [],
    restore: () => {
      pg.Client.prototype.query = original;
    },
  };
  pg.Client.prototype.query = function (this: unknown, config: unknown, values?: unknown, ...rest: unknown[]) {
    const text = typeof config === 'string' ? config : (config as { text?: string } | undefined)?.text;
    const params = Array.isArray(values) ? values : (config as { values?: unknown[] } | undefined)?.values;
    if (state.capturing && typeof text === 'string' && matches.test(text)) {
      state.captured.push({ text, values: params ?? [] });
    }
    return (original as (...args: unknown[]) => unknown).call(this, config, values, ...rest);
  } as typeof original;
  return state;
}
