import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { DedupQueueModuleOptions } from './interfaces/dedup-queue-options.interface';

export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: DEDUP_QUEUE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<DedupQueueModuleOptions>({ moduleName: 'DedupQueue' })
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
