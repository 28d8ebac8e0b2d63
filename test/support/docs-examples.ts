import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The code of the README and of `docs/*.md`, taken out of the Markdown so that `test/packed-package.e2e-spec.ts`
 * compiles it in a fresh application against the packed package: no example in the documentation can rot, and a
 * reader who copies one gets code that compiles.
 *
 * What is compiled:
 * - the README's one-file app, between `<!-- one-file-app:start -->` and `<!-- one-file-app:end -->` (it also runs);
 * - every block `<!-- compiled-example:start NAME -->`, a ```ts fence of files (each starts at its `// name.ts` line),
 *   `<!-- compiled-example:end -->`, in the README or a page of `docs/`: its files, under `src/examples/NAME/`;
 * - every other ```ts fence of the README and `docs/*.md`, as it is, as a module of its own under
 *   `docs-check/<page>/block-<n>.ts`: nothing is added to it, so it carries its own imports and defines what it uses;
 * - except a fence right after `<!-- docs-check: fragment: REASON -->`, which is not compiled; the reason is
 *   required. A fragment is the exception: a line that sums up a page, or a file that imports a project's own files.
 */

export const ONE_FILE_APP_START = '<!-- one-file-app:start -->';
export const ONE_FILE_APP_END = '<!-- one-file-app:end -->';
const COMPILED_BLOCK =
  /<!-- compiled-example:start ([\w-]+) -->\n```ts\n([\s\S]*?)\n```\n<!-- compiled-example:end -->/g;
/** A line that starts a file in such a block: `// app.module.ts`, maybe followed by a comment. */
const FILE_HEADER = /^\/\/ ([\w.-]+\.ts)\b.*$/gm;
const FENCE = /^```ts\n([\s\S]*?)\n^```$/gm;
const FRAGMENT = /<!-- docs-check: fragment\b(.*?)-->\n$/;
/** The markers of the hidden preambles that supplied a block's imports before, refused so that none comes back. */
const RETIRED_MARKER = /<!-- docs-check: (preamble|statements)\b/;

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

export interface DocsBlock {
  /** Where the fence is: `docs/page.md:42`. */
  source: string;
  kind: 'module' | 'fragment';
  /** The file to compile, under `docs-check/` (none for a fragment). */
  file?: string;
  /** The fence's code as it is, after a comment line naming its source. */
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
    const retired = RETIRED_MARKER.exec(text);
    if (retired) {
      throw new Error(
        `${doc}: <!-- docs-check: ${retired[1]} --> is gone: a block carries its own imports and declarations`,
      );
    }
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
      const fragment = FRAGMENT.exec(text.slice(Math.max(0, fence.index - 300), fence.index));
      if (fragment) {
        const reason = fragment[1].replace(/^[\s:—-]+/, '').trim();
        if (!reason) throw new Error(`${source}: a docs-check fragment needs a reason`);
        blocks.push({ source, kind: 'fragment', reason });
        continue;
      }
      n += 1;
      blocks.push({
        source,
        kind: 'module',
        file: `docs-check/${page}/block-${n}.ts`,
        code: `// ${source}\n${fence[1]}\n`,
      });
    }
  }
  return blocks;
}
