/** The schema's name as an SQL string literal, from its quoted identifier (`"dedup_queue"` → `'dedup_queue'`). */
export function schemaLiteral(schemaSql: string): string {
  const name = schemaSql.replace(/^"|"$/g, '').replace(/""/g, '"');
  return `'${name.replace(/'/g, "''")}'`;
}
