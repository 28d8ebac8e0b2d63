/**
 * Limits on the values callers store through the module (`forRoot({ inputLimits })`), checked before anything is
 * written: by the JavaScript API (an `InvalidArgumentError` naming the field) and by `<schema>.enqueue_workflow(...)`
 * in SQL (SQLSTATE 22023). A workflow's result or a step's result over a limit fails that run, as a value JSON cannot
 * hold does. Keys (workflow IDs, deduplication IDs, partition keys, topics, idempotency and event keys) are at most
 * 255 characters, a fixed limit. See docs/production.md, "Security".
 */
export interface InputLimits {
  /**
   * The largest JSON text of a stored value, in bytes (UTF-8): a workflow's arguments, a message (`send`), an event's
   * value (`setEvent`), a workflow's or a step's result. Default 4 MiB (4194304).
   */
  maxValueBytes?: number;
  /**
   * The deepest nesting of arrays and objects in such a value; the arguments' own array counts as one level
   * (`[{ "a": [1] }]` is 3 deep). Default 64.
   */
  maxDepth?: number;
  /**
   * How many values one durable stream may hold (`writeStream`); past it `writeStream` throws `StreamLimitError`
   * and appends nothing. Default 100000.
   */
  maxStreamValues?: number;
  /** How many bytes of JSON (UTF-8) one durable stream's values may hold together. Default 16 MiB (16777216). */
  maxStreamBytes?: number;
}
