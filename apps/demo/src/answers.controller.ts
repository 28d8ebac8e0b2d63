import { Body, Controller, Get, Header, Headers, Param, Post, Sse, UseFilters } from '@nestjs/common';
import type { MessageEvent } from '@nestjs/common';
import { DedupExceptionFilter, InvalidArgumentError, QueueService } from 'nest-dedup-queue';
import type { Observable } from 'rxjs';
import { ANSWERS_PAGE } from './answers.page';
import { Answers, TOKENS } from './answers.service';

/**
 * A streaming workflow over HTTP. `POST /answers` `{ question }` starts the fake model's answer: 201
 * `{ workflow_id, tokens_url }`, or, while the same question is being answered, 409 with the holder's
 * `existingWorkflowId` and a `Location` of its tokens, which the refused caller follows. `GET /answers/:id/tokens`
 * is the answer as server-sent events (`id` the token's offset, `data` the token as JSON, a last `end` event),
 * resuming after the `Last-Event-ID` an `EventSource` sends when it reconnects. `GET /answers` is a page that
 * does all this in a browser.
 */
@Controller('answers')
@UseFilters(new DedupExceptionFilter({ location: (error) => `/answers/${error.existingWorkflowId}/tokens` }))
export class AnswersController {
  constructor(
    private readonly queueService: QueueService,
    private readonly answers: Answers,
  ) {}

  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  page(): string {
    return ANSWERS_PAGE;
  }

  @Post()
  async ask(@Body() body: { question?: unknown }): Promise<{ workflow_id: string; tokens_url: string }> {
    const question = typeof body?.question === 'string' ? body.question.trim() : '';
    if (question === '' || question.length > 500) {
      throw new InvalidArgumentError('question', 'must be a non-empty string of at most 500 characters');
    }
    const handle = await this.queueService.enqueue(this.answers.answer, [question], {
      deduplicationId: question.toLowerCase(),
    });
    return { workflow_id: handle.workflowId, tokens_url: `/answers/${handle.workflowId}/tokens` };
  }

  @Sse(':id/tokens')
  tokens(@Param('id') id: string, @Headers('last-event-id') lastEventId?: string): Observable<MessageEvent> {
    return this.queueService.streamEvents(id, TOKENS, { lastEventId });
  }
}
