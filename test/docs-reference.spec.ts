/**
 * The reference cannot drift from the code (no database): every runtime export of the package's root and every key
 * of its public option interfaces (read from the TypeScript source with the compiler API) is named in docs/api.md,
 * and every outcome label of the metrics is named in docs/operations.md.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as packageRoot from 'nest-dedup-queue';
import ts from 'typescript';

const ROOT = path.resolve(__dirname, '..');
const SOURCE = path.join(ROOT, 'packages/nest-dedup-queue/src');

/** The text of a page's code: its code spans and code blocks, where the reference names what it documents. */
function codeOf(page: string): string {
  const text = readFileSync(path.join(ROOT, page), 'utf8');
  const blocks = [...text.matchAll(/```[^\n]*\n([\s\S]*?)```/g)].map((match) => match[1]);
  const spans = [...text.replace(/```[\s\S]*?```/g, '').matchAll(/`([^`]+)`/g)].map((match) => match[1]);
  return [...blocks, ...spans].join('\n');
}

function notNamedIn(code: string, names: Iterable<string>): string[] {
  return [...names].filter((name) => !new RegExp(`(^|[^\\w$])${name.replace(/\$/g, '\\$')}(?![\\w$])`).test(code));
}

/** The root index's exported interfaces (and type aliases of object types) whose names say they are options. */
function publicOptionKeys(): Map<string, string[]> {
  const program = ts.createProgram([path.join(SOURCE, 'index.ts')], {
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const index = program.getSourceFile(path.join(SOURCE, 'index.ts'));
  const moduleSymbol = index && checker.getSymbolAtLocation(index);
  if (!moduleSymbol) throw new Error('cannot read the package root index');
  const keys = new Map<string, string[]>();
  for (const exported of checker.getExportsOfModule(moduleSymbol)) {
    const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    if (!(symbol.flags & ts.SymbolFlags.Interface) || !/(Options|Limits?)$/.test(symbol.name)) continue;
    const type = checker.getDeclaredTypeOfSymbol(symbol);
    keys.set(
      symbol.name,
      checker.getPropertiesOfType(type).map((property) => property.name),
    );
  }
  return keys;
}

/** The outcome labels `dedup_queue_deduplicated_total` exports: the `OUTCOMES` list of the metrics. */
function metricOutcomes(): string[] {
  const file = path.join(SOURCE, 'reporting/queue.metrics.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
  const outcomes: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isVariableDeclaration(node) && node.name.getText() === 'OUTCOMES' && node.initializer) {
      const list = ts.isAsExpression(node.initializer) ? node.initializer.expression : node.initializer;
      if (ts.isArrayLiteralExpression(list)) {
        for (const element of list.elements) if (ts.isStringLiteral(element)) outcomes.push(element.text);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return outcomes;
}

describe('the reference pages name what the code exports', () => {
  const api = codeOf('docs/api.md');

  it('docs/api.md names every runtime export of the package root', () => {
    const exported = Object.keys(packageRoot).filter((name) => name !== '__esModule');
    expect(exported).toEqual(expect.arrayContaining(['DedupQueueModule', 'QueueService', 'QueueDeduplicatedError']));
    expect(notNamedIn(api, exported)).toEqual([]);
  });

  it('docs/api.md names every key of the public option interfaces', () => {
    const interfaces = publicOptionKeys();
    expect([...interfaces.keys()]).toEqual(
      expect.arrayContaining(['DedupQueueModuleOptions', 'EnqueueOptions', 'QueueOptions', 'WorkflowOptions']),
    );
    expect(interfaces.get('EnqueueOptions')).toEqual(expect.arrayContaining(['maxDelayMs', 'requireSameArgs']));
    const missing = [...interfaces].flatMap(([name, keys]) => notNamedIn(api, keys).map((key) => `${name}.${key}`));
    expect(missing).toEqual([]);
  });

  it('docs/operations.md names every outcome label of the deduplication metric', () => {
    const outcomes = metricOutcomes();
    expect(outcomes).toEqual(expect.arrayContaining(['rejected', 'superseded', 'mismatched', 'sent']));
    expect(notNamedIn(codeOf('docs/operations.md'), outcomes)).toEqual([]);
  });

  it('finds a name only where the page names it in code', () => {
    expect(notNamedIn('`maxDelayMs` and `a.b(requireSameArgs)`', ['maxDelayMs', 'requireSameArgs', 'delayMs'])).toEqual(
      ['delayMs'],
    );
  });
});
