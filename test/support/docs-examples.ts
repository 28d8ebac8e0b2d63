import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The code of the README and of `docs/*.md`, taken out of the Markdown so that `test/packed-package.e2e-spec.ts`
 * compiles it in a fresh application against the packed package: no example in the documentation can rot.
 *
 * What is compiled:
 * - the README's one-file app, between `<!-- one-file-app:start -->` and `<!-- one-file-app:end -->` (it also runs);
 * - every block `<!-- compiled-example:start NAME -->`, a ```ts fence of files (each starts at its `// name.ts` line),
 *   `<!-- compiled-example:end -->`, in the README or a page of `docs/`: its files, under `src/examples/NAME/`;
 * - every other ```ts fence of the README and `docs/*.md`, as a module of its own under `docs-check/<page>/block-<n>.ts`:
 *   - the page's preamble comes first: the lines of a hidden `<!-- docs-check: preamble ... -->` comment, imports
 *     and one-line declarations (`declare const queueService: QueueService;`) of what the page's examples take as
 *     given. A block gets only the preamble lines it uses (by name, with what those lines use in turn), never a
 *     name the block imports or declares itself;
 *   - a fence right after `<!-- docs-check: statements -->` holds statements (`await queueService.enqueue(...)`):
 *     it is compiled as the body of `async function (this: DocsThis)`, `DocsThis` being the preamble's type of
 *     `this` (its workflows), and the block's own `import` lines go first;
 *   - a fence right after `<!-- docs-check: fragment REASON -->` is not compiled; the reason is required. A fragment
 *     is the exception: a piece of a signature or a class that cannot stand alone.
 */

export const ONE_FILE_APP_START = '<!-- one-file-app:start -->';
export const ONE_FILE_APP_END = '<!-- one-file-app:end -->';
const COMPILED_BLOCK =
  /<!-- compiled-example:start ([\w-]+) -->\n```ts\n([\s\S]*?)\n```\n<!-- compiled-example:end -->/g;
/** A line that starts a file in such a block: `// app.module.ts`, maybe followed by a comment. */
const FILE_HEADER = /^\/\/ ([\w.-]+\.ts)\b.*$/gm;
const PREAMBLE = /<!-- docs-check: preamble\n([\s\S]*?)\n-->/;
const FENCE = /^```ts\n([\s\S]*?)\n^```$/gm;
const MARKER = /<!-- docs-check: (statements|fragment)\b(.*?)-->\n$/;
const IMPORT = /^import\s+(type\s+)?\{([^}]*)\}\s+from\s+('[^']+');?$/;
const IMPORT_ANY = /^import\s[\s\S]*?from\s+'[^']+';?$/gm;
const DECLARED =
  /^(?:export\s+)?(?:declare\s+)?(?:abstract\s+)?(?:const|let|var|class|function|interface|type|enum)\s+(\w+)/gm;

/** The Markdown files whose code is compiled: the README and every page of `docs/`, repository-relative. */
export async function documentationFiles(root: string): Promise<string[]> {
  const pages = (await readdir(path.join(root, 'docs'))).filter((file) => file.endsWith('.md')).sort();
  return ['README.md', ...pages.map((page) => `docs/${page}`)];
}

/** The README's one-file application, between its markers. */
export async function oneFileApp(root: string): Promise<string> {
  const readme = await readFile(path.join(root, 'README.md'), 'utf8');
  const start = readme.indexOf(ONE_FILE_APP_START);
  const end = readme.indexOf(ONE_FILE_APP_END);
  if (start < 0 || end < start) {
    throw new Error(`README.md has no block between ${ONE_FILE_APP_START} and ${ONE_FILE_APP_END}`);
  }
  const block = readme.slice(start + ONE_FILE_APP_START.length, end).trim();
  const code = /^```ts\n([\s\S]*)\n```$/.exec(block);
  if (!code) throw new Error('the README block between the one-file-app markers is not a single ```ts fence');
  return code[1];
}

/** The blocks marked `compiled-example`, in the README and `docs/`, as files under `src/examples/<block>/`. */
export async function multiFileExamples(root: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  for (const doc of await documentationFiles(root)) {
    const text = await readFile(path.join(root, doc), 'utf8');
    for (const [, block, code] of text.matchAll(COMPILED_BLOCK)) {
      const headers = [...code.matchAll(FILE_HEADER)];
      if (headers[0]?.index !== 0) throw new Error(`${doc}: block "${block}" does not start with a // file.ts line`);
      headers.forEach((header, index) => {
        const file = path.join('src/examples', block, header[1]);
        if (files.has(file)) throw new Error(`${doc}: ${file} is defined twice`);
        const text = code.slice(header.index, headers[index + 1]?.index ?? code.length);
        files.set(file, text.trim() + '\n');
      });
    }
  }
  return files;
}

interface PreambleLine {
  text: string;
  /** The names the line binds. */
  names: string[];
}

function preambleLines(preamble: string): PreambleLine[] {
  return preamble
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trim().startsWith('//'))
    .flatMap((line): PreambleLine[] => {
      const imported = IMPORT.exec(line);
      if (imported) {
        // One line per name, so that a block gets only the names it uses.
        return imported[2]
          .split(',')
          .map((name) => name.trim())
          .filter(Boolean)
          .map((name) => ({
            text: `import ${imported[1] ?? ''}{ ${name} } from ${imported[3]};`,
            names: [name.split(/\s+as\s+/).pop() as string],
          }));
      }
      const names = [...line.matchAll(DECLARED)].map((match) => match[1]);
      if (names.length === 0) throw new Error(`a docs-check preamble line binds no name: ${line}`);
      return [{ text: line, names }];
    });
}

/** The names a block binds itself: its imports and its top-level declarations. */
function boundNames(code: string): Set<string> {
  const names = new Set<string>();
  for (const statement of code.match(IMPORT_ANY) ?? []) {
    const specifiers = /\{([^}]*)\}/.exec(statement)?.[1] ?? '';
    for (const name of specifiers.split(','))
      if (name.trim())
        names.add(
          name
            .trim()
            .split(/\s+as\s+/)
            .pop() as string,
        );
    const defaultName = /^import\s+(?:type\s+)?(\w+)/.exec(statement)?.[1];
    if (defaultName && defaultName !== 'type') names.add(defaultName);
    const namespace = /\*\s+as\s+(\w+)/.exec(statement)?.[1];
    if (namespace) names.add(namespace);
  }
  for (const match of code.matchAll(DECLARED)) names.add(match[1]);
  return names;
}

const uses = (code: string, name: string): boolean => new RegExp(`(?<![\\w.$])${name}\\b`).test(code);

/** The preamble lines a block needs: those whose names it uses, and what those use, minus what it binds itself. */
function preambleFor(lines: PreambleLine[], code: string): string[] {
  const bound = boundNames(code);
  const available = lines.filter((line) => !line.names.some((name) => bound.has(name)));
  const chosen = new Set<PreambleLine>();
  let texts = [code];
  for (let grew = true; grew;) {
    grew = false;
    for (const line of available) {
      if (!chosen.has(line) && line.names.some((name) => texts.some((text) => uses(text, name)))) {
        chosen.add(line);
        texts = [...texts, line.text];
        grew = true;
      }
    }
  }
  return available.filter((line) => chosen.has(line)).map((line) => line.text);
}

export interface DocsBlock {
  /** Where the fence is: `docs/page.md:42`. */
  source: string;
  kind: 'module' | 'statements' | 'fragment';
  /** The file to compile, under `docs-check/` (none for a fragment). */
  file?: string;
  code?: string;
  /** Why a fragment is not compiled. */
  reason?: string;
}

/**
 * Every ```ts fence of the README and `docs/*.md` outside the one-file app and the `compiled-example` blocks (those
 * are compiled as they are), with what to compile for it.
 */
export async function docsBlocks(root: string): Promise<DocsBlock[]> {
  const blocks: DocsBlock[] = [];
  for (const doc of await documentationFiles(root)) {
    const text = await readFile(path.join(root, doc), 'utf8');
    const preamble = preambleLines(PREAMBLE.exec(text)?.[1] ?? '');
    const page = doc === 'README.md' ? 'readme' : path.basename(doc, '.md');
    const inCompiledExample = [...text.matchAll(COMPILED_BLOCK)].map(
      (match) => [match.index, match.index + match[0].length] as const,
    );
    const oneFileApp = text.indexOf(ONE_FILE_APP_START);
    if (oneFileApp >= 0) inCompiledExample.push([oneFileApp, text.indexOf(ONE_FILE_APP_END)]);
    let n = 0;
    for (const fence of text.matchAll(FENCE)) {
      if (inCompiledExample.some(([start, end]) => fence.index > start && fence.index < end)) continue;
      const source = `${doc}:${text.slice(0, fence.index).split('\n').length}`;
      const marker = MARKER.exec(text.slice(Math.max(0, fence.index - 300), fence.index));
      const code = fence[1];
      if (marker?.[1] === 'fragment') {
        const reason = marker[2].replace(/^[\s:—-]+/, '').trim();
        if (!reason) throw new Error(`${source}: a docs-check fragment needs a reason`);
        blocks.push({ source, kind: 'fragment', reason });
        continue;
      }
      n += 1;
      const file = `docs-check/${page}/block-${n}.ts`;
      const header = `// ${source}\n`;
      if (marker?.[1] === 'statements') {
        const imports: string[] = code.match(IMPORT_ANY) ?? [];
        const body = imports.reduce((rest, statement) => rest.replace(statement, ''), code).trim();
        const given = preambleFor(preamble, `${code}\nDocsThis`);
        const thisType = given.some((line) => /\bDocsThis\b/.test(line)) ? '' : 'type DocsThis = unknown;\n';
        const indented = body.replace(/^(?=.)/gm, '  ');
        blocks.push({
          source,
          kind: 'statements',
          file,
          code:
            `${header}${[...imports, ...given].join('\n')}\n${thisType}\n` +
            `export async function example(this: DocsThis) {\n${indented}\n}\n`,
        });
      } else {
        blocks.push({
          source,
          kind: 'module',
          file,
          code: `${header}${preambleFor(preamble, code).join('\n')}\n\n${code}\n\nexport {};\n`,
        });
      }
    }
  }
  return blocks;
}
