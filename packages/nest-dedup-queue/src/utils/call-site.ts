import { relative, resolve } from 'node:path';

// NOTE: the package's root, not dist/: with source maps on (--enable-source-maps), frames of dist/ name src/ files.
const PACKAGE_ROOT = resolve(__dirname, '..', '..');

/**
 * Where the application called into this package, as `file:line:column` relative to the working directory: the
 * first stack frame outside the package. Undefined when the stack does not tell.
 */
export function callSite(): string | undefined {
  const frames = (new Error().stack ?? '').split('\n').slice(1);
  for (const frame of frames) {
    const location = /\((.*):(\d+):(\d+)\)$/.exec(frame) ?? /at (.*):(\d+):(\d+)$/.exec(frame);
    if (!location || location[1].startsWith(PACKAGE_ROOT) || location[1].startsWith('node:')) continue;
    return `${relative(process.cwd(), location[1])}:${location[2]}:${location[3]}`;
  }
  return undefined;
}
