/**
 * The suite on NestJS 12, in the throwaway copy that .ci/nest12-suite.sh installs. NestJS 12 ships ES modules only,
 * and jest's module system cannot `require()` them as Node 20.19+ does, so @swc/jest also compiles the @nestjs
 * packages (and nothing else in node_modules) to CommonJS; the library and the tests load them through jest's
 * registry as they load NestJS 11.
 */
const base = require('../jest.config');

const swcForNodeModules = [
  '@swc/jest',
  { jsc: { parser: { syntax: 'ecmascript' }, target: 'es2022' }, module: { type: 'commonjs' } },
];

module.exports = {
  ...base,
  rootDir: require('node:path').resolve(__dirname, '..'),
  transform: { ...base.transform, '/node_modules/@nestjs/.+\\.js$': swcForNodeModules },
  transformIgnorePatterns: ['/node_modules/(?!@nestjs/)'],
  // Packaging, not NestJS: it builds a NestJS 11 app of its own, and runs in the NestJS 11 pass. Upgrade, not NestJS:
  // it builds the previous release from git history, which this copy lacks (also run in the NestJS 11 pass).
  testPathIgnorePatterns: [
    '/node_modules/',
    '<rootDir>/test/packed-package.e2e-spec.ts',
    '<rootDir>/test/upgrade-from-previous-release.e2e-spec.ts',
    '<rootDir>/test/citus-upgrade-from-1-1.e2e-spec.ts',
  ],
};
