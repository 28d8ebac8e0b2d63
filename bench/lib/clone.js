'use strict';
// Prefill for systems without a bulk enqueue: enqueue ONE job through the system's own API, then copy that row
// n-1 times in SQL, changing only what must be unique. Every prefilled row is then exactly what the API writes.
const { query } = require('./pg');

/**
 * @param url        the system's database
 * @param table      schema-qualified table holding one template row (found by `templateWhere`, on alias `t`)
 * @param overrides  column -> SQL expression of `i` (1..n-1), e.g. { id: 'gen_random_uuid()::text' }
 */
async function cloneTemplateRow(url, table, templateWhere, templateParams, n, overrides) {
  const [schema, name] = table.split('.');
  const columns = (
    await query(
      url,
      `SELECT column_name FROM information_schema.columns
       WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' AND identity_generation IS NULL
       ORDER BY ordinal_position`,
      [schema, name],
    )
  ).map((row) => row.column_name);
  const select = columns.map((column) => (column in overrides ? `${overrides[column]}` : `t.${quote(column)}`));
  const [template] = await query(
    url,
    `SELECT count(*)::int AS n FROM ${table} AS t WHERE ${templateWhere}`,
    templateParams,
  );
  if (template.n !== 1) throw new Error(`expected one template row in ${table}, found ${template.n}`);
  await query(
    url,
    `INSERT INTO ${table} (${columns.map(quote).join(', ')})
     SELECT ${select.join(', ')} FROM ${table} AS t CROSS JOIN generate_series(1, $${templateParams.length + 1}::int) AS i
     WHERE ${templateWhere}`,
    [...templateParams, n - 1],
  );
}

const quote = (identifier) => `"${identifier.replace(/"/g, '""')}"`;

module.exports = { cloneTemplateRow };
