import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * The relative links of Markdown files, checked without a network: each target file exists inside the checked
 * tree (the repository, or the unpacked npm package), and each `#anchor` names a heading of its page as GitHub
 * makes anchors of headings. Links to http(s) and mailto are left alone.
 */

/** The code of a Markdown text taken out (fences and inline spans), so that code that looks like a link is not one. */
function withoutCode(markdown: string): string {
  return markdown
    .replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, (block) => block.replace(/[^\n]/g, ' '))
    .replace(/(`+)[\s\S]*?\1/g, (span) => span.replace(/[^\n]/g, ' '));
}

/** GitHub's anchor of a heading: its text lowercased, punctuation dropped, spaces made hyphens. */
export function headingSlug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link in a heading keeps its text
    .replace(/(`+)([\s\S]*?)\1|<[^>]+>/g, (match, ticks?: string, code?: string) => (ticks ? (code ?? '') : '')) // tags go, code stays
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\- _]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors of a Markdown text's headings, with GitHub's `-1`, `-2` suffixes for repeated ones. */
export function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  const text = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const [, heading] of text.matchAll(/^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$/gm)) {
    const slug = headingSlug(heading);
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    result.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return result;
}

export interface BrokenLink {
  /** `docs/page.md:12` */
  where: string;
  target: string;
  problem: string;
}

/** Every relative link and anchor of `files` (paths relative to `root`) that does not resolve to a file in `root`. */
export function brokenLinks(root: string, files: string[]): BrokenLink[] {
  const broken: BrokenLink[] = [];
  const anchorsOf = new Map<string, Set<string>>();
  const anchorsIn = (file: string): Set<string> => {
    if (!anchorsOf.has(file)) anchorsOf.set(file, anchors(readFileSync(file, 'utf8')));
    return anchorsOf.get(file) as Set<string>;
  };
  for (const file of files) {
    const absolute = path.join(root, file);
    const text = withoutCode(readFileSync(absolute, 'utf8'));
    const targets = [
      ...[...text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map(
        (match) => [match[1], match.index] as const,
      ),
      ...[...text.matchAll(/^\s*\[[^\]]+\]:\s+(\S+)/gm)].map((match) => [match[1], match.index] as const),
    ];
    for (const [target, index] of targets) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const where = `${file}:${text.slice(0, index).split('\n').length}`;
      const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined];
      const resolved = pathPart === '' ? absolute : path.resolve(path.dirname(absolute), decodeURI(pathPart));
      const relative = path.relative(root, resolved);
      if (relative.startsWith('..') || path.isAbsolute(relative)) {
        broken.push({ where, target, problem: `${relative} is outside the root` });
        continue;
      }
      if (!existsSync(resolved)) {
        broken.push({ where, target, problem: `${path.relative(root, resolved)} does not exist` });
        continue;
      }
      if (anchor === undefined) continue;
      if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) {
        broken.push({ where, target, problem: 'an anchor into something that is not a Markdown file' });
      } else if (!anchorsIn(resolved).has(decodeURIComponent(anchor).toLowerCase())) {
        broken.push({ where, target, problem: `${path.relative(root, resolved)} has no heading #${anchor}` });
      }
    }
  }
  return broken;
}

/** The README and the pages of `docs/`, relative to `root`. */
export function documentationPages(root: string): string[] {
  const pages = readdirSync(path.join(root, 'docs')).filter((file) => file.endsWith('.md'));
  return ['README.md', ...pages.sort().map((page) => `docs/${page}`)];
}
