// Lets child processes spawned by the tests run TypeScript fixtures directly: `node -r ./test/support/swc-register.js fixture.ts`.
const { transformSync } = require('@swc/core');
const fs = require('node:fs');

require.extensions['.ts'] = (module, filename) => {
  const { code } = transformSync(fs.readFileSync(filename, 'utf8'), {
    filename,
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
    },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  });
  module._compile(code, filename);
};
