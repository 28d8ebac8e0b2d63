import { randomFillSync } from 'node:crypto';

let lastMs = 0;
let counter = 0;

/** Random bytes drawn once for many IDs (`randomBytes` per ID costs a buffer and a call into the random source). */
const random = Buffer.alloc(4096);
let randomAt = random.length;

/** The offset in `random` of `n` fresh random bytes. */
function takeRandom(n: number): number {
  if (randomAt + n > random.length) {
    randomFillSync(random);
    randomAt = 0;
  }
  randomAt += n;
  return randomAt - n;
}

const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/**
 * A new workflow ID: a time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds, a 12-bit counter that
 * keeps the IDs one process makes in one millisecond in order, then random bits. Each insert into an index on
 * workflow IDs lands at the index's right edge, instead of on a random page that a checkpoint then writes whole.
 */
export function newWorkflowId(): string {
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = random.readUInt16BE(takeRandom(2)) & 0x3ff;
  } else {
    counter += 1;
    if (counter > 0xfff) {
      lastMs += 1;
      counter = 0;
    }
    ms = lastMs;
  }
  const time = ms.toString(16).padStart(12, '0');
  const at = takeRandom(8);
  let tail = '';
  for (let i = 2; i < 8; i++) tail += HEX[random[at + i]];
  return (
    `${time.slice(0, 8)}-${time.slice(8)}-${HEX[0x70 | (counter >> 8)]}${HEX[counter & 0xff]}-` +
    `${HEX[(random[at] & 0x3f) | 0x80]}${HEX[random[at + 1]]}-${tail}`
  );
}
