// ESLint (flat config): typescript-eslint's type-checked rules for the TypeScript, ESLint's recommended rules for
// the plain JavaScript (bench, CI helpers, the dashboard's browser script). Formatting is Prettier's (npm run format).
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/**',
      '**/dist/**',
      'coverage/**',
      'bench/results/**',
      '.throwaway-postgres/**',
      '.generated/**',
      'test/.previous-release/**',
    ],
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    extends: [js.configs.recommended],
    languageOptions: { sourceType: 'commonjs', globals: { ...globals.node } },
    rules: { 'no-unused-vars': ['error', { argsIgnorePattern: '^_', ignoreRestSiblings: true }] },
  },
  { files: ['**/*.mjs'], languageOptions: { sourceType: 'module' } },
  {
    files: ['packages/nest-dedup-queue/src/dashboard/static/**/*.js'],
    languageOptions: { sourceType: 'script', globals: { ...globals.browser } },
  },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // Unused arguments and caught errors named with a leading underscore are deliberate, and so are the properties
      // that a rest destructuring leaves out (`const { stack: _stack, ...rest } = error`).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
    },
  },
  {
    // The callers of the queue: `queueService.enqueue(queue, this.tasks.process, ...)` passes a method reference,
    // which the module only uses as a key (it calls the workflow on its provider instance), so unbound-method's
    // warning is a false positive there (the README says the same to users).
    files: ['test/**/*.ts', 'apps/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/unbound-method': 'off' },
  },
  {
    // Tests read pg rows and HTTP bodies untyped on purpose and assert on their values at run time; workflow bodies
    // in fixtures are async without awaiting. The library keeps these rules: its rows are typed through query<T>.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/require-await': 'off',
    },
  },
);
