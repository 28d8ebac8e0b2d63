/**
 * A connection URL that is not a Postgres URL is refused at once, before any connection is tried, with a
 * `DedupQueueConfigurationError` that says what is wrong and shows the URL with its password masked; the password
 * reaches neither the error nor the log. The URLs point at a listener that counts connections and never answers, so
 * a connection attempt would show (and would hang the boot for the connect timeout times the retries).
 */
import { Test } from '@nestjs/testing';
import { DedupQueueConfigurationError, DedupQueueModule, DedupQueueModuleOptions } from 'nest-dedup-queue';
import { Blackhole, startBlackhole } from './support/blackhole';
import { CapturingLogger } from './support/capturing-logger';

const PASSWORD = 'S3cret-pw';

describe('a connection URL that is not a Postgres URL', () => {
  let blackhole: Blackhole;
  let logger: CapturingLogger;

  beforeAll(async () => {
    blackhole = await startBlackhole();
  });

  afterAll(() => blackhole?.close());

  beforeEach(() => {
    logger = new CapturingLogger();
  });

  const boot = async (options: Partial<DedupQueueModuleOptions>) => {
    const startedAt = Date.now();
    const error = await (async () => {
      const module = await Test.createTestingModule({
        imports: [
          DedupQueueModule.forRoot({
            queues: [{ name: 'tasks' }],
            retryAttempts: 100,
            retryDelay: 1000,
            connectTimeoutMs: 30_000,
            ...options,
          }),
        ],
      })
        .setLogger(logger)
        .compile();
      await module.init();
      await module.close();
    })().then(
      () => undefined,
      (caught: unknown) => caught as Error,
    );
    return { error, elapsedMs: Date.now() - startedAt };
  };

  const port = () => blackhole.port;
  const cases: Array<[string, () => Partial<DedupQueueModuleOptions>, RegExp]> = [
    [
      'text that is no URL',
      () => ({ connection: { url: 'not a url' } }),
      /`connection\.url` is not a URL; give postgres:\/\/user:password@host:5432\/database; got "not a url"/,
    ],
    [
      'a URL missing the colon after its scheme',
      () => ({ connection: { url: `postgres//app:${PASSWORD}@127.0.0.1:${port()}/db` } }),
      /`connection\.url` is not a URL; .*got "postgres\/\/app:\*\*\*@127\.0\.0\.1:\d+\/db"/,
    ],
    [
      'a MySQL URL',
      () => ({ connection: { url: `mysql://app:${PASSWORD}@127.0.0.1:${port()}/db` } }),
      /`connection\.url` starts with "mysql:"; nest-dedup-queue needs PostgreSQL: postgres:\/\/ or postgresql:\/\/ .*got "mysql:\/\/app:\*\*\*@127\.0\.0\.1:\d+\/db"/,
    ],
    [
      'a one-slash URL, whose password would otherwise show up as the database name',
      () => ({ connection: { url: `postgres:/app:${PASSWORD}@127.0.0.1:${port()}/db` } }),
      /`connection\.url` has no "\/\/" after "postgres:"; write postgres:\/\/user:password@host:5432\/database; got "postgres:\/app:\*\*\*@127\.0\.0\.1:\d+\/db"/,
    ],
    [
      'a password with an unencoded #',
      () => ({ connection: { url: `postgresql://app:${PASSWORD}#x@127.0.0.1:${port()}/db` } }),
      /`connection\.url` is not a valid URL; percent-encode .*got "postgresql:\/\/app:\*\*\*@127\.0\.0\.1:\d+\/db"/,
    ],
    [
      'a password given as a parameter of a URL without a scheme',
      () => ({ connection: { url: `127.0.0.1:${port()}/db?user=app&password=${PASSWORD}` } }),
      /`connection\.url` is not a URL; .*password=\*\*\*"/,
    ],
    [
      'a listen URL that is not a Postgres URL',
      () => ({
        connection: { url: blackhole.url },
        listen: { url: `postgres:app:${PASSWORD}@127.0.0.1:${port()}/db` },
      }),
      /`listen\.url` has no "\/\/" after "postgres:".*got "postgres:app:\*\*\*@127\.0\.0\.1:\d+\/db"/,
    ],
  ];

  it.each(cases)('refuses %s at once, naming the problem, the password masked', async (_, options, message) => {
    const accepted = blackhole.accepted;
    const { error, elapsedMs } = await boot(options());
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect(error?.message).toMatch(message);
    expect(error?.message).not.toContain(PASSWORD);
    expect(logger.lines.filter((line) => line.message.includes(PASSWORD))).toEqual([]);
    expect(blackhole.accepted).toBe(accepted);
    expect(elapsedMs).toBeLessThan(2000);
  });

  it('still reads a valid URL whose password has encoded reserved characters, and never logs the password', async () => {
    const { error } = await boot({
      connection: { url: `postgres://app:${encodeURIComponent(`${PASSWORD}#/@`)}@127.0.0.1:${port()}/db` },
      retryAttempts: 0,
      connectTimeoutMs: 300,
    });
    expect(blackhole.accepted).toBeGreaterThan(0);
    expect(error?.message).toContain(`Postgres at 127.0.0.1:${port()}/db as user "app"`);
    expect(error?.message).not.toContain(PASSWORD);
    expect(logger.lines.filter((line) => line.message.includes(PASSWORD))).toEqual([]);
  });
});
