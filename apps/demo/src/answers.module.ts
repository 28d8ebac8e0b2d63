import { Module } from '@nestjs/common';
import { DedupQueueModule } from 'nest-dedup-queue';
import { AnswersController } from './answers.controller';
import { Answers } from './answers.service';

/** The streaming feature: its queue, the fake model's workflow, and its HTTP routes (see AnswersController). */
@Module({
  imports: [DedupQueueModule.registerQueue({ name: 'answers', workerConcurrency: 20 })],
  controllers: [AnswersController],
  providers: [Answers],
})
export class AnswersModule {}
