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

  // forceCloseConnections: at shutdown, once running workflows have finished, open connections (the answers' SSE
  // streams) are closed instead of holding the server open; browsers reconnect with Last-Event-ID.
  const app = await NestFactory.create(AppModule, { forceCloseConnections: true });
  // SIGTERM/SIGINT: workers stop claiming, running workflows finish, the lease is given up; then the throwaway
  // server (if one was started) stops when the signal reaches it.
  app.enableShutdownHooks();
  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port);
  logger.log(
    `Listening on http://localhost:${port}  (try: curl -i -X POST http://localhost:${port}/process/u1, twice)`,
  );
  logger.log(`Dashboard: http://localhost:${port}/queues`);
}

void bootstrap();
