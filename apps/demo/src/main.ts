import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { databaseUrlOrThrowaway } from 'throwaway-postgres';
import { AppModule } from './app.module';

async function bootstrap(): Promise<void> {
  const logger = new Logger('Demo');
  const database = await databaseUrlOrThrowaway();
  process.env.DATABASE_URL = database.url;
  logger.log(database.throwaway ? `Started a throwaway PostgreSQL at ${database.url}` : 'Using DATABASE_URL');

  const app = await NestFactory.create(AppModule);
  // Like app.enableShutdownHooks(), plus stopping the throwaway server once the app (and its workers) closed.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      logger.log(`${signal}: draining workflows and shutting down`);
      void app
        .close()
        .finally(() => database.stop())
        .finally(() => process.exit(0));
    });
  }
  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port);
  logger.log(`Listening on http://localhost:${port}  (try: curl -i -X POST http://localhost:${port}/process/u1, twice)`);
  logger.log(`Dashboard: http://localhost:${port}/queues`);
}

void bootstrap();
