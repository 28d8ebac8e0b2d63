import { randomBytes } from 'node:crypto';

let lastMs = 0;
let counter = 0;

/**
 * A new workflow ID: a time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds, a 12-bit counter that
 * keeps the IDs one process makes in one millisecond in order, then random bits. Each insert into an index on
 * workflow IDs lands at the index's right edge, instead of on a random page that a checkpoint then writes whole.
 */
export function newWorkflowId(): string {
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = randomBytes(2).readUInt16BE(0) & 0x3ff;
  } else {
    counter += 1;
    if (counter > 0xfff) {
      lastMs += 1;
      counter = 0;
    }
    ms = lastMs;
  }
  const bytes = randomBytes(16);
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = 0x70 | (counter >> 8);
  bytes[7] = counter & 0xff;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
