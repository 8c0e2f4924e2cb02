/**
 * Upload batches' framing (shared/src/batch.ts): what a relay encodes the receiver decodes
 * exactly, and a body that does not frame exactly is refused with a code, never misread.
 */
import t from 'tap';
import fc from 'fast-check';
import { BATCH_MAX_NAME, batchSize, decodeBatch, encodeBatch, readBatchAnswer, type CapstanError } from '@capstan/shared';

const codeOf = (f: () => unknown): string | undefined => {
  try {
    f();
    return undefined;
  } catch (err) {
    return (err as CapstanError).code;
  }
};

const file = fc.record({
  name: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 200 }),
  body: fc.uint8Array({ maxLength: 2000 }),
});

t.test('any files encode and decode back to the same names and bytes, in order', async (t) => {
  fc.assert(fc.property(fc.array(file, { maxLength: 40 }), (files) => {
    const body = encodeBatch(files);
    if (body.length !== batchSize(files)) return false;
    const back = decodeBatch(body, 1000);
    return back.length === files.length && back.every((f, i) => f.name === files[i]!.name && Buffer.from(f.body).equals(Buffer.from(files[i]!.body)));
  }));
  t.pass('round trip holds');
});

t.test('bodies are views into the batch, not copies', async (t) => {
  const shared = Buffer.from(new SharedArrayBuffer(64));
  const enc = encodeBatch([{ name: 'a', body: Buffer.from('hello') }]);
  enc.copy(shared);
  const [f] = decodeBatch(shared.subarray(0, enc.length), 10);
  t.equal(f!.body.buffer, shared.buffer, 'same memory');
  t.equal(Buffer.from(f!.body).toString(), 'hello');
});

t.test('a body that does not frame exactly is refused with ERR_BATCH_FORMAT', async (t) => {
  const good = encodeBatch([{ name: 'x.log', body: Buffer.from('abc') }, { name: 'y.log', body: Buffer.from('defg') }]);
  // A cut between two files frames a shorter batch: Content-Length is what tells it from a whole one.
  const boundary = 2 + 'x.log'.length + 4 + 3;
  for (let cut = 1; cut < good.length; cut++) {
    if (cut === boundary) continue;
    t.equal(codeOf(() => decodeBatch(good.subarray(0, cut), 10)), 'ERR_BATCH_FORMAT', `truncated at ${cut} of ${good.length}`);
  }
  t.same(decodeBatch(Buffer.alloc(0), 10), [], 'an empty batch holds no file');
  const zeroName = Buffer.from([0, 0, 0, 0, 0, 1, 65]);
  t.equal(codeOf(() => decodeBatch(zeroName, 10)), 'ERR_BATCH_FORMAT', 'an empty name');
  const long = Buffer.alloc(2 + BATCH_MAX_NAME + 1 + 4);
  long.writeUInt16BE(BATCH_MAX_NAME + 1, 0);
  t.equal(codeOf(() => decodeBatch(long, 10)), 'ERR_BATCH_FORMAT', 'a name over the bound');
  const notUtf8 = Buffer.from([0, 2, 0xc3, 0x28, 0, 0, 0, 0]);
  t.equal(codeOf(() => decodeBatch(notUtf8, 10)), 'ERR_BATCH_FORMAT', 'a name that is not UTF-8');
  const huge = Buffer.from([0, 1, 65, 0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
  t.equal(codeOf(() => decodeBatch(huge, 10)), 'ERR_BATCH_FORMAT', 'a body length past the end');
  t.throws(() => encodeBatch([{ name: '', body: Buffer.alloc(1) }]), RangeError, 'the encoder refuses an empty name');
  t.throws(() => encodeBatch([{ name: 'n'.repeat(BATCH_MAX_NAME + 1), body: Buffer.alloc(1) }]), RangeError, 'and an overlong one');
});

t.test('random bytes are decoded or refused with a code, never anything else', async (t) => {
  fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
    const code = codeOf(() => decodeBatch(Buffer.from(bytes), 5));
    return code === undefined || code === 'ERR_BATCH_FORMAT' || code === 'ERR_BATCH_TOO_LARGE';
  }));
  t.pass('no other failure');
});

t.test('more files than the limit is ERR_BATCH_TOO_LARGE', async (t) => {
  const files = Array.from({ length: 6 }, (_, i) => ({ name: `f${i}`, body: Buffer.from([i]) }));
  t.equal(decodeBatch(encodeBatch(files), 6).length, 6);
  t.equal(codeOf(() => decodeBatch(encodeBatch(files), 5)), 'ERR_BATCH_TOO_LARGE');
});

t.test('an answer must hold one result per sent file, in order', async (t) => {
  const ok = { data: { files: [{ file: 'a', status: 201 }, { file: 'b', status: 400, error: { code: 'ERR_RUNINFO_NAME', message: 'bad' } }] } };
  t.same(readBatchAnswer(ok, ['a', 'b']).map((r) => r.status), [201, 400]);
  t.equal(codeOf(() => readBatchAnswer(ok, ['a'])), 'ERR_BATCH_FORMAT', 'too many results');
  t.equal(codeOf(() => readBatchAnswer(ok, ['b', 'a'])), 'ERR_BATCH_FORMAT', 'another order');
  t.equal(codeOf(() => readBatchAnswer({ data: { files: [{ file: 'a', status: 'ok' }] } }, ['a'])), 'ERR_BATCH_FORMAT', 'a status that is no number');
  t.equal(codeOf(() => readBatchAnswer({ data: { files: [{ file: 'a', status: 99 }] } }, ['a'])), 'ERR_BATCH_FORMAT', 'a status out of range');
  t.equal(codeOf(() => readBatchAnswer(null, ['a'])), 'ERR_BATCH_FORMAT', 'no answer');
  t.equal(codeOf(() => readBatchAnswer({ error: { code: 'ERR_X' } }, ['a'])), 'ERR_BATCH_FORMAT', 'an error body');
});
