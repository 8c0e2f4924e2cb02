import t from 'tap';
import { deflateRawSync } from 'node:zlib';
import { isZstdFrame } from '@capstan/shared';
import { packOutcomes, packedOrNull, unpackOutcomes } from '@capstan/server/store/runs/outcomes';
import type { RunSummaryOutcome } from '@capstan/server/store/store';

const outcomes = Array.from({ length: 80 }, (_, i) => ({
  rule_id: `rule-${i % 7}`, directive_id: `dir-${i % 13}`, component: `component ${i}`, value: i % 3 ? `/etc/file-${i}` : 'None',
  status: i % 17 === 0 ? 'repaired' : 'success', message: `message ${i} ✓`,
})) as unknown as RunSummaryOutcome[];
const json = JSON.stringify(outcomes);

t.test('outcomes are packed as one zstd frame and read back identical', async (t) => {
  const packed = packOutcomes(json);
  t.ok(isZstdFrame(packed), 'a zstd frame');
  t.ok(packed.length < Buffer.byteLength(json) / 3, `packed: ${packed.length} of ${Buffer.byteLength(json)} bytes`);
  t.same(unpackOutcomes(packed, '[]'), outcomes);
  t.ok(packOutcomes(Buffer.from(json)).equals(packed), 'the same JSON packs to the same bytes (the steady-state check compares them)');
  t.ok(packedOrNull(outcomes)?.equals(packed), 'packed from the outcomes themselves');
  t.equal(packedOrNull([]), null, 'no outcomes: nothing packed');
});

t.test('rows packed with raw deflate before zstd still read back', async (t) => {
  for (const level of [1, 6, 9]) {
    const old = deflateRawSync(Buffer.from(json), { level });
    t.notOk(isZstdFrame(old), `deflate level ${level} is not taken for zstd`);
    t.same(unpackOutcomes(old, '[]'), outcomes, `deflate level ${level}`);
  }
  t.same(unpackOutcomes(null, json), outcomes, 'rows from before packing: the JSON column');
});

t.test('a corrupt packed row is refused, not misread', async (t) => {
  const packed = packOutcomes(json);
  const flipped = Buffer.from(packed);
  flipped[flipped.length - 6] ^= 0xff;
  t.throws(() => unpackOutcomes(flipped, '[]'), 'a damaged frame fails its checksum or its decoding');
  t.throws(() => unpackOutcomes(packed.subarray(0, packed.length - 10), '[]'), 'a truncated frame');
});
