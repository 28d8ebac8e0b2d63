import { relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

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

/**
 * The file of the first stack frame outside this package, as the running code names it: the JavaScript file (not
 * the source a source map points to), or a `file:` URL for an ES module. Undefined when the stack does not tell.
 */
export function callerFile(): string | undefined {
  // eslint-disable-next-line @typescript-eslint/unbound-method -- put back as it was, never called here
  const original = Error.prepareStackTrace;
  try {
    // NOTE: V8's own call sites name the file that runs, whatever --enable-source-maps makes of the text.
    Error.prepareStackTrace = (_error, frames) => frames;
    const holder: { stack?: NodeJS.CallSite[] } = {};
    Error.captureStackTrace(holder, callerFile);
    return (holder.stack ?? [])
      .map((frame) => frame.getFileName())
      .find(
        (file): file is string =>
          !!file && !file.startsWith('node:') && !pathOf(file).startsWith(PACKAGE_ROOT) && file !== 'native',
      );
  } finally {
    Error.prepareStackTrace = original;
  }
}

function pathOf(file: string): string {
  return file.startsWith('file:') ? fileURLToPath(file) : file;
}
