import { Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Workflow, runStep, writeStream } from 'nest-dedup-queue';
import { demoConfig } from './demo.config';

/** The stream an answer's tokens are written to, read by `GET /answers/:id/tokens`. */
export const TOKENS = 'tokens';

/**
 * The demo's streaming workflow: a fake language model that answers a question token by token. Each token is
 * written to the workflow's `tokens` stream as it comes; a browser follows it with an `EventSource`, and a
 * reconnect (or a restart of the server) resumes after the last token it received.
 */
@Injectable()
export class Answers {
  @Workflow({ queue: 'answers' })
  async answer(question: string): Promise<string> {
    const tokens = await runStep('generate', () => fakeModel(question));
    for (const token of tokens) {
      await sleep(demoConfig().tokenDelayMs); // the model thinking
      await writeStream(TOKENS, token); // recorded: re-executed after a crash, it is not written twice
    }
    return tokens.join('');
  }
}

/** What the fake model answers, cut into tokens (a word and its trailing space). */
function fakeModel(question: string): string[] {
  const answer =
    `You asked: "${question}". Durable streams keep every token of this answer in Postgres: a browser that ` +
    'reconnects resumes after the last token it received, a server restart loses nothing, and a second asker of ' +
    'the same question follows this answer instead of starting another.';
  return answer.match(/\S+\s*/g) ?? [];
}
