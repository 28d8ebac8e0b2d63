import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { brokenLinks, documentationPages, headingSlug } from './support/doc-links';

/**
 * Every relative link and #anchor of the README, the CHANGELOG and docs/ resolves (no network: http links are not
 * fetched). test/packed-package.e2e-spec.ts checks the same in the npm package.
 */
describe('the links of the README, the CHANGELOG and docs/', () => {
  const ROOT = path.resolve(__dirname, '..');

  it('all resolve: files exist, anchors name headings as GitHub makes them', () => {
    const pages = documentationPages(ROOT);
    expect(pages).toEqual(expect.arrayContaining(['README.md', 'docs/api.md', 'docs/deduplication.md']));
    expect(brokenLinks(ROOT, [...pages, 'CHANGELOG.md', 'bench/README.md'])).toEqual([]);
  });

  it("makes GitHub's anchors of headings", () => {
    expect(headingSlug('`DedupQueueModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`')).toBe(
      'dedupqueuemoduleforrootoptions--forrootasync-imports-inject-usefactory-',
    );
    expect(headingSlug("Sharing the application's TypeORM connection")).toBe(
      'sharing-the-applications-typeorm-connection',
    );
    expect(headingSlug('Schedules: coming from `@nestjs/schedule`')).toBe('schedules-coming-from-nestjsschedule');
    expect(headingSlug('From SQL and triggers: `<schema>.enqueue_workflow(...)`')).toBe(
      'from-sql-and-triggers-schemaenqueue_workflow',
    );
  });

  describe('on broken links', () => {
    let dir: string;
    beforeAll(async () => {
      dir = await mkdtemp(path.join(tmpdir(), 'docs-links-'));
      await mkdir(path.join(dir, 'docs'));
      await writeFile(
        path.join(dir, 'README.md'),
        [
          '# Title',
          '',
          '## Repeated',
          '',
          '## Repeated',
          '',
          '[fine](docs/page.md#a-section) [fine](#repeated-1) [web](https://example.com/#nothing)',
          '[no file](docs/missing.md) [no anchor](docs/page.md#no-such-section) [here](#nothing-here)',
          '`[in code](docs/missing.md)`',
          '',
          '```md',
          '[in a fence](docs/missing.md)',
          '```',
        ].join('\n'),
      );
      await writeFile(path.join(dir, 'docs/page.md'), '# Page\n\n## A section\n\n[back](../README.md#title)\n');
    });
    afterAll(() => rm(dir, { recursive: true, force: true }));

    it('names a link out of the root, even to a file that exists', async () => {
      const root = path.join(dir, 'docs');
      await writeFile(path.join(root, 'out.md'), '[up](../README.md) [in](page.md)\n');
      expect(brokenLinks(root, ['out.md'])).toEqual([
        { where: 'out.md:1', target: '../README.md', problem: '../README.md is outside the root' },
      ]);
    });

    it('names each: a missing file, a missing anchor in another page and in the same page', () => {
      expect(brokenLinks(dir, ['README.md', 'docs/page.md'])).toEqual([
        { where: 'README.md:8', target: 'docs/missing.md', problem: 'docs/missing.md does not exist' },
        {
          where: 'README.md:8',
          target: 'docs/page.md#no-such-section',
          problem: 'docs/page.md has no heading #no-such-section',
        },
        { where: 'README.md:8', target: '#nothing-here', problem: 'README.md has no heading #nothing-here' },
      ]);
    });
  });
});
