import {
  UnexpectedValue,
  WORKFLOW_STATUSES,
  WorkflowErrorInfo,
  WorkflowStatus,
} from '../../interfaces/workflow-status.interface';

/** The latest (and, negated, the earliest) time a JavaScript `Date` holds: what an infinite timestamp reads as. */
const FURTHEST_DATE_MS = 8.64e15;

/**
 * Reads the stored values of one row into their documented types without ever throwing: a value that is not what
 * the library writes (an infinite time, an error that is not `{ name, message }`, an unknown status, a missing
 * number) is replaced by a stand-in and noted in `unexpected`, for the read to report with that row while the rest
 * is served. One per row.
 */
export class RowValues {
  readonly unexpected: UnexpectedValue[] = [];

  /** A time (null stays null); an infinite one reads as the furthest date, or as null when `infinityIsNone`. */
  date(field: string, value: unknown, infinityIsNone = false): Date | null {
    if (value === null || value === undefined) return null;
    if (value instanceof Date && !Number.isNaN(value.getTime())) return value;
    if (value === Infinity && infinityIsNone) return null;
    this.note(field, value);
    if (value === Infinity || value === -Infinity) return new Date(Math.sign(value) * FURTHEST_DATE_MS);
    return null;
  }

  /** A time that is never null: the epoch stands in for a missing or unreadable one. */
  requiredDate(field: string, value: unknown): Date {
    const date = this.date(field, value);
    if (date !== null) return date;
    if (value === null || value === undefined) this.note(field, value);
    return new Date(0);
  }

  text(field: string, value: unknown): string | null {
    if (value === null || value === undefined || typeof value === 'string') return value ?? null;
    this.note(field, value);
    return describe(value);
  }

  requiredText(field: string, value: unknown): string {
    const text = this.text(field, value);
    if (text !== null) return text;
    this.note(field, value);
    return '';
  }

  /** A number (a bigint column's text included); 0 stands in for a missing or unreadable one. */
  number(field: string, value: unknown): number {
    const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
    if (typeof number === 'number' && Number.isFinite(number)) return number;
    this.note(field, value);
    return 0;
  }

  status(field: string, value: unknown): WorkflowStatus {
    if (WORKFLOW_STATUSES.includes(value as WorkflowStatus)) return value as WorkflowStatus;
    this.note(field, value);
    return (typeof value === 'string' ? value : describe(value)) as WorkflowStatus;
  }

  /** A recorded error: `{ name, message }` with its other fields as stored; null when there is none or it is not one. */
  error(field: string, value: unknown): WorkflowErrorInfo | null {
    if (value === null || value === undefined) return null;
    const info = value as Partial<WorkflowErrorInfo>;
    if (typeof value === 'object' && !Array.isArray(value) && typeof info.name === 'string') {
      if (typeof info.message === 'string') return value as WorkflowErrorInfo;
    }
    this.note(field, value);
    return null;
  }

  /** The unexpected values as the read reports them: absent when there are none. */
  report(): { unexpectedValues?: UnexpectedValue[] } {
    return this.unexpected.length > 0 ? { unexpectedValues: this.unexpected } : {};
  }

  private note(field: string, value: unknown): void {
    this.unexpected.push({ field, value: describe(value) });
  }
}

/** A stored value as text, for `unexpectedValues`. */
function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'number' || typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toString();
  try {
    return JSON.stringify(value) ?? Object.prototype.toString.call(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
