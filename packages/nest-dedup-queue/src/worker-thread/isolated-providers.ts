import { type INestApplicationContext, type LoggerService, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { extname } from 'node:path';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { IsolatedTarget } from '../discovery/workflow.registry';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import { ThreadServicesModule } from './thread-services.module';

/** A provider whose workflow method the thread calls. */
export type IsolatedProvider = Record<string, (...args: unknown[]) => Promise<unknown>>;

/** The root of the application context a worker thread builds for isolated providers. */
@Module({})
class IsolatedRootModule {}

// NOTE: a real import(): TypeScript compiles `import()` to `require()` for CommonJS, which cannot load ES modules.
// eslint-disable-next-line @typescript-eslint/no-implied-eval -- a constant body, the one way to keep import()
const importModule = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<unknown>;

/**
 * The providers of the isolated workflows, as a worker thread builds them, once per thread: it loads the file that
 * declares the workflow's class, takes the class among its exports, and builds it in a Nest application context of
 * its own, from the workflow's `threadModule` when it has one (one context per module), else from the class alone,
 * next to the library's services (`ThreadServicesModule`).
 */
export class IsolatedProviders {
  private readonly providers = new Map<string, Promise<IsolatedProvider>>();
  private readonly contexts = new Map<Type, Promise<INestApplicationContext>>();

  constructor(
    private readonly queueNames: string[],
    private readonly logger: LoggerService,
  ) {}

  /** The provider of `target`, built at its first use; a failure is tried again at the next. */
  providerOf(target: IsolatedTarget): Promise<IsolatedProvider> {
    const key = `${target.file}#${target.className}`;
    let provider = this.providers.get(key);
    if (!provider) {
      provider = this.build(target);
      this.providers.set(key, provider);
      provider.catch(() => this.providers.delete(key));
    }
    return provider;
  }

  /** Closes every context (their providers' `onModuleDestroy`, ...), before the thread ends. */
  async close(): Promise<void> {
    const contexts = await Promise.allSettled(this.contexts.values());
    await Promise.allSettled(
      contexts.flatMap((context) => (context.status === 'fulfilled' ? [context.value.close()] : [])),
    );
  }

  private async build(target: IsolatedTarget): Promise<IsolatedProvider> {
    const providerClass = findClass(await loadFile(target.file), target);
    const method = (providerClass.prototype as IsolatedProvider)[target.methodName];
    const metadata = Reflect.getMetadata(WORKFLOW_METADATA, method) as WorkflowMetadata | undefined;
    const threadModule = metadata?.options.threadModule?.();
    if (threadModule !== undefined && typeof threadModule !== 'function') {
      throw new Error(
        `@Workflow({ threadModule }) of ${target.className} returned ${String(threadModule)}, not a module`,
      );
    }
    const context = await this.contextFor(threadModule ?? providerClass, threadModule === undefined);
    try {
      return context.get<IsolatedProvider>(providerClass, { strict: false });
    } catch (error) {
      throw new Error(
        `${threadModule!.name} (its threadModule) does not provide ${target.className}; add it to the module's ` +
          `providers (${(error as Error).message})`,
      );
    }
  }

  private contextFor(root: Type, isProvider: boolean): Promise<INestApplicationContext> {
    let context = this.contexts.get(root);
    if (!context) {
      context = this.createContext(root, isProvider);
      this.contexts.set(root, context);
      context.catch(() => this.contexts.delete(root));
    }
    return context;
  }

  private async createContext(root: Type, isProvider: boolean): Promise<INestApplicationContext> {
    const services = ThreadServicesModule.register(this.queueNames);
    const module = isProvider
      ? { module: IsolatedRootModule, imports: [services], providers: [root] }
      : { module: IsolatedRootModule, imports: [services, root] };
    try {
      return await NestFactory.createApplicationContext(module, { logger: this.logger, abortOnError: false });
    } catch (error) {
      const nest = (error as Error).message;
      if (!isProvider) throw new Error(`Nest could not build its threadModule ${root.name}: ${nest}`);
      throw new Error(
        `${root.name} runs in a worker thread, which provides only QueueService, ScheduleService and the ` +
          `@InjectQueue() queues unless the workflow names a module to build there: ` +
          `@Workflow({ isolate: 'thread', threadModule: () => MyThreadModule }) (${nest})`,
      );
    }
  }
}

/** The exports of the file (or `file:` URL) that declares an isolated workflow's class. */
async function loadFile(file: string): Promise<Record<string, unknown>> {
  try {
    if (file.startsWith('file:')) return (await importModule(file)) as Record<string, unknown>;
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the application's file, known at run time
    return require(file) as Record<string, unknown>;
  } catch (error) {
    const typescript = ['.ts', '.mts', '.cts'].includes(extname(file));
    throw new Error(
      `the worker thread could not load ${file}: ${(error as Error).message}` +
        (typescript
          ? ' (a TypeScript source: run the compiled JavaScript, or give the thread a loader, e.g. ' +
            "forRoot({ isolation: { execArgv: ['--require', 'ts-node/register'] } }))"
          : ''),
    );
  }
}

/** The workflow's class among a file's exports (named or default), recognised by its name and its `@Workflow()`. */
function findClass(exports: Record<string, unknown>, target: IsolatedTarget): Type & { prototype: IsolatedProvider } {
  const candidates = [exports, ...Object.values(exports), (exports as { default?: unknown }).default];
  const found = candidates.find(
    (candidate) =>
      typeof candidate === 'function' &&
      candidate.name === target.className &&
      (
        Reflect.getMetadata(
          WORKFLOW_METADATA,
          (candidate.prototype as Record<string, object>)?.[target.methodName] ?? {},
        ) as WorkflowMetadata | undefined
      )?.name === target.workflowName,
  );
  if (!found) {
    throw new Error(
      `${target.file} does not export ${target.className}; export the class from the file that declares it, so ` +
        `that the worker thread can load it`,
    );
  }
  return found as Type & { prototype: IsolatedProvider };
}
