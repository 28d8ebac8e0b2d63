import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { preProcessFile } from 'typescript';

/**
 * The library's import structure, read from its source with the TypeScript compiler: no file imports itself back
 * through others (a circle), and no file imports from a layer above its own (docs/repository.md tells the
 * layers). Type-only imports count: a type ties two files as much as a value does.
 */
const SRC = join(__dirname, '../packages/nest-dedup-queue/src');

/**
 * The layers, top to bottom, as the folders tell them (a path ending in `/` is a folder). A file may import from
 * its own layer and those below it; a file in no layer fails the test until it is placed.
 */
const LAYERS: { name: string; paths: string[] }[] = [
  {
    name: 'module',
    paths: [
      'index.ts',
      'testing.ts',
      'dedup-queue.module.ts',
      'queues/',
      'scheduling/',
      'dashboard/',
      'decorators/',
      'filters/',
      'worker-thread/',
    ],
  },
  {
    name: 'services',
    paths: [
      'queue.service.ts',
      'enqueue/',
      'control/',
      'child-workflows.ts',
      'reporting/',
      'composition/workflow-events.ts',
      'composition/message.sender.ts',
      'lookup/',
      'workflow-handle.factory.ts',
      'queue-workflow.handle.ts',
    ],
  },
  {
    name: 'execution',
    paths: [
      'scheduler/',
      'notifications/',
      'execution/',
      'composition/',
      'isolation/',
      'observability/',
      'queue-settings.ts',
      'workflow-completions.ts',
    ],
  },
  { name: 'discovery', paths: ['discovery/'] },
  { name: 'database', paths: ['database/'] },
  {
    name: 'foundation',
    paths: [
      'errors/',
      'interfaces/',
      'utils/',
      'transactions/',
      'dedup-queue.config.ts',
      'dedup-queue.module-definition.ts',
      'dedup-queue.constants.ts',
    ],
  },
];

/**
 * Circles left to the storage rewrite of issue 20, which is replacing these files. Listed whole; the test fails
 * when one is gone, so that it is deleted here.
 */
const KNOWN_CIRCLES: string[][] = [];

type Imports = ReadonlyMap<string, readonly string[]>;

describe('the import structure of packages/nest-dedup-queue/src', () => {
  const imports = readImports();

  it('reads the whole library', () => {
    expect(imports.size).toBeGreaterThan(100);
    expect(imports.get('queue.service.ts')).toContain('enqueue/enqueue.service.ts');
  });

  it('has no circle of imports', () => {
    const circles = findCircles(imports).map((files) => files.sort());
    const known = KNOWN_CIRCLES.map((files) => [...files].sort().join(' '));
    const unknown = circles.filter((files) => !known.includes(files.join(' ')));
    expect(unknown.map((files) => describeCircle(files, imports))).toEqual([]);
    const gone = known.filter((files) => !circles.some((circle) => circle.join(' ') === files));
    expect(gone.map((files) => `no longer a circle, delete it from KNOWN_CIRCLES: ${files}`)).toEqual([]);
  });

  it('has no circle of imports between the top-level folders and files', () => {
    const units = foldersOf(imports);
    expect(findCircles(units).map((members) => describeCircle(members.sort(), units))).toEqual([]);
  });

  it('places every file in a layer', () => {
    expect([...imports.keys()].filter((file) => layerOf(file) === undefined)).toEqual([]);
  });

  it('imports only from the same layer or the layers below', () => {
    const upward: string[] = [];
    for (const [file, targets] of imports) {
      for (const target of targets) {
        const [from, to] = [layerOf(file), layerOf(target)];
        if (from !== undefined && to !== undefined && to < from) {
          upward.push(`${file} (${LAYERS[from].name}) -> ${target} (${LAYERS[to].name})`);
        }
      }
    }
    expect(upward).toEqual([]);
  });
});

/** Each source file (relative to SRC) with the source files it imports or re-exports. */
function readImports(): Imports {
  const files = listSources(SRC).map((file) => relative(SRC, file).split('\\').join('/'));
  const known = new Set(files);
  const imports = new Map<string, string[]>();
  for (const file of files) {
    const { importedFiles } = preProcessFile(readFileSync(join(SRC, file), 'utf8'), true, true);
    const targets = importedFiles
      .map(({ fileName }) => fileName)
      .filter((specifier) => specifier.startsWith('.'))
      .map((specifier) => {
        const base = normalize(join(dirname(file), specifier))
          .split('\\')
          .join('/');
        const target = [`${base}.ts`, `${base}/index.ts`].find((candidate) => known.has(candidate));
        if (!target) throw new Error(`${file}: cannot resolve the import of "${specifier}"`);
        return target;
      });
    imports.set(file, [...new Set(targets)]);
  }
  return imports;
}

function listSources(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return listSources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The imports between top-level units: a folder of `src/` (`scheduler/`) or a file at its root. */
function foldersOf(imports: Imports): Imports {
  const unit = (file: string) => (file.includes('/') ? `${file.split('/')[0]}/` : file);
  const units = new Map<string, Set<string>>();
  for (const [file, targets] of imports) {
    const from = units.get(unit(file)) ?? new Set<string>();
    for (const target of targets) if (unit(target) !== unit(file)) from.add(unit(target));
    units.set(unit(file), from);
  }
  return new Map([...units].map(([name, targets]) => [name, [...targets]]));
}

function layerOf(file: string): number | undefined {
  const index = LAYERS.findIndex(({ paths }) =>
    paths.some((path) => (path.endsWith('/') ? file.startsWith(path) : file === path)),
  );
  return index === -1 ? undefined : index;
}

/** The strongly connected components of more than one file, or of a file that imports itself (Tarjan). */
function findCircles(imports: Imports): string[][] {
  const order = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const visit = (file: string): void => {
    order.set(file, order.size);
    low.set(file, order.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const target of imports.get(file) ?? []) {
      if (!order.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, order.get(target)!));
      }
    }
    if (low.get(file) !== order.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || imports.get(file)?.includes(file)) circles.push(component);
  };
  for (const file of imports.keys()) if (!order.has(file)) visit(file);
  return circles;
}

function describeCircle(files: string[], imports: Imports): string {
  const ties = files.flatMap((file) =>
    (imports.get(file) ?? []).filter((target) => files.includes(target)).map((target) => `${file} -> ${target}`),
  );
  return `circle: ${ties.join(', ')}`;
}
