import t from 'tap';
import { fixturesAbsent } from '../helpers/programs.js';
import { makeZip } from '../helpers/zip.js';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import fc from 'fast-check';
import { CapstanError, compress, compressSync, decompress, type EnvelopeCompression } from '@capstan/shared';

const FIXTURES = path.resolve(import.meta.dirname, '../../../shared/conformance/rudder');
const GZ = path.join(FIXTURES, 'files/gz');
const noFixtures = fixturesAbsent(GZ);
const MiB = 1024 * 1024;

/** The error code decompress ends with, or 'ok'; anything but a CapstanError fails the test. */
async function outcome(data: Buffer, c: EnvelopeCompression, maxBytes = MiB): Promise<string> {
  try {
    await decompress(data, c, { maxBytes });
    return 'ok';
  } catch (err) {
    if (err instanceof CapstanError) return err.code;
    throw err;
  }
}

/**
 * A zstd frame of RLE blocks (4 bytes per 128 KiB of output), built by hand so that a 1 GiB bomb
 * costs nothing to make. With `declare`, the header states the content size.
 */
function zstdRleBomb(total: number, declare: boolean): Buffer {
  const BLOCK = 128 * 1024;
  const parts = [Buffer.from([0x28, 0xb5, 0x2f, 0xfd])];
  if (declare) {
    const h = Buffer.alloc(10);
    h[0] = 0xc0; // 8-byte frame content size, not single-segment
    h[1] = 0x38; // window 2^17
    h.writeBigUInt64LE(BigInt(total), 2);
    parts.push(h);
  } else {
    parts.push(Buffer.from([0x00, 0x38]));
  }
  const n = total / BLOCK;
  for (let i = 0; i < n; i++) {
    const hdr = (BLOCK << 3) | (1 << 1) | (i === n - 1 ? 1 : 0); // size, type RLE, last-block bit
    parts.push(Buffer.from([hdr & 0xff, (hdr >> 8) & 0xff, (hdr >> 16) & 0xff, 0x61]));
  }
  return Buffer.concat(parts);
}

const sample = Buffer.from(
  Array.from({ length: 400 }, (_, i) => `2024-01-01T00:00:${String(i % 60).padStart(2, '0')}+00:00 R: @@x@@result_success@@r${i}@@d@@0@@c@@None@@t##n@#ok\n`).join(''),
);

// --- RUDDER fixtures -----------------------------------------------------------------------------

t.test('RUDDER normal.log.gz decompresses to normal.log', { skip: noFixtures }, async (t) => {
  const out = await decompress(fs.readFileSync(path.join(GZ, 'normal.log.gz')), 'gzip', { maxBytes: MiB });
  t.ok(out.equals(fs.readFileSync(path.join(GZ, 'normal.log'))));
});

t.test('RUDDER normal.log.zip\'s first entry is normal.log', { skip: noFixtures }, async (t) => {
  const out = await decompress(fs.readFileSync(path.join(GZ, 'normal.log.zip')), 'zip', { maxBytes: MiB });
  t.ok(out.equals(fs.readFileSync(path.join(GZ, 'normal.log'))));
});

t.test('a plain file is read as is', { skip: noFixtures }, async (t) => {
  const log = fs.readFileSync(path.join(GZ, 'normal.log'));
  t.equal(await decompress(log, 'none', { maxBytes: MiB }), log);
});

// --- round trips ---------------------------------------------------------------------------------

t.test('gzip and zstd round-trip through compress, compressSync and decompress', async (t) => {
  const inputs = [Buffer.alloc(0), Buffer.from('x'), sample, Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7919) & 0xff))];
  for (const c of ['gzip', 'zstd', 'none'] as const) {
    for (const input of inputs) {
      const a = await compress(input, c);
      const b = compressSync(input, c);
      t.ok((await decompress(a, c, { maxBytes: input.length })).equals(input), `${c} async, ${input.length} bytes`);
      t.ok((await decompress(b, c, { maxBytes: input.length })).equals(input), `${c} sync, ${input.length} bytes`);
    }
  }
  t.ok((await compress(sample, 'zstd')).length < sample.length / 5, 'zstd compresses');
});

t.test('compression levels are honoured and checked', async (t) => {
  for (const [c, level] of [['gzip', 1], ['gzip', 9], ['zstd', 1], ['zstd', 19], ['zstd', -5]] as const) {
    t.ok((await decompress(await compress(sample, c, level), c, { maxBytes: MiB })).equals(sample), `${c} level ${level}`);
  }
  await t.rejects(compress(sample, 'gzip', 10), RangeError);
  await t.rejects(compress(sample, 'zstd', 99), RangeError);
});

t.test('output from the gzip and zstd command-line formats decompresses', async (t) => {
  // Several gzip members (as `cat a.gz b.gz` makes) and several zstd frames are one stream each.
  const gz = Buffer.concat([zlib.gzipSync(sample), zlib.gzipSync(sample)]);
  t.ok((await decompress(gz, 'gzip', { maxBytes: MiB })).equals(Buffer.concat([sample, sample])));
  const zst = Buffer.concat([compressSync(sample, 'zstd'), compressSync(sample, 'zstd')]);
  t.ok((await decompress(zst, 'zstd', { maxBytes: MiB })).equals(Buffer.concat([sample, sample])));
});

t.test('zip: stored and deflated entries, the first file wins, directories are skipped', async (t) => {
  const other = Buffer.from('second entry');
  t.ok((await decompress(makeZip([{ name: 'a.log', data: sample, method: 0 }]), 'zip', { maxBytes: MiB })).equals(sample), 'stored');
  t.ok((await decompress(makeZip([{ name: 'a.log', data: sample }]), 'zip', { maxBytes: MiB })).equals(sample), 'deflated');
  const two = makeZip([{ name: 'a.log', data: sample }, { name: 'b.log', data: other }]);
  t.ok((await decompress(two, 'zip', { maxBytes: MiB })).equals(sample), 'first entry');
  const dirFirst = makeZip([{ name: 'dir/', data: Buffer.alloc(0), method: 0 }, { name: 'dir/b.log', data: other }]);
  t.ok((await decompress(dirFirst, 'zip', { maxBytes: MiB })).equals(other), 'directory skipped');
  // A name yauzl would refuse as a path is fine here: nothing is written to disk.
  t.ok((await decompress(makeZip([{ name: '../../etc/x', data: other }]), 'zip', { maxBytes: MiB })).equals(other), 'odd name');
});

// --- limits --------------------------------------------------------------------------------------

t.test('the limit holds exactly at the boundary for every envelope', async (t) => {
  const n = sample.length;
  const packed: Record<EnvelopeCompression, Buffer> = {
    none: sample,
    gzip: compressSync(sample, 'gzip'),
    zstd: compressSync(sample, 'zstd'),
    zip: makeZip([{ name: 'a', data: sample }]),
  };
  for (const [c, data] of Object.entries(packed) as Array<[EnvelopeCompression, Buffer]>) {
    t.equal(await outcome(data, c, n), 'ok', `${c}: exactly maxBytes`);
    t.equal(await outcome(data, c, n - 1), 'ERR_DECOMPRESSED_TOO_LARGE', `${c}: one byte over`);
    t.equal(await outcome(data, c, 0), 'ERR_DECOMPRESSED_TOO_LARGE', `${c}: limit 0`);
  }
  // Streams that do not state their size are caught while inflating, at the same boundary.
  const zipLying = makeZip([{ name: 'a', data: sample, declaredSize: 10 }]);
  t.equal(await outcome(zipLying, 'zip', n), 'ERR_DECOMPRESS', 'zip entry larger than it declares is corrupt');
  for (const [name, s] of [['zstd without content size', zstdRleBomb(MiB, false)], ['zstd with content size', zstdRleBomb(MiB, true)]] as const) {
    t.equal(await outcome(s, 'zstd', MiB), 'ok', `${name}: exactly maxBytes`);
    t.equal(await outcome(s, 'zstd', MiB - 1), 'ERR_DECOMPRESSED_TOO_LARGE', `${name}: one byte over`);
  }
  const empty: Array<[EnvelopeCompression, Buffer]> = [['gzip', compressSync(Buffer.alloc(0), 'gzip')],
    ['zstd', compressSync(Buffer.alloc(0), 'zstd')], ['zip', makeZip([{ name: 'a', data: Buffer.alloc(0) }])], ['none', Buffer.alloc(0)]];
  for (const [c, data] of empty) t.equal(await outcome(data, c, 0), 'ok', `${c}: empty content within limit 0`);
});

t.test('a 1 GiB zstd bomb is refused quickly with little memory', async (t) => {
  for (const declare of [false, true]) {
    const bomb = zstdRleBomb(1024 * MiB, declare);
    t.ok(bomb.length < 40_000, `bomb is ${bomb.length} bytes`);
    const rss0 = process.memoryUsage().rss;
    const t0 = performance.now();
    await t.rejects(decompress(bomb, 'zstd', { maxBytes: 32 * MiB }), { code: 'ERR_DECOMPRESSED_TOO_LARGE' });
    const ms = performance.now() - t0;
    const grewMb = (process.memoryUsage().rss - rss0) / MiB;
    t.comment(`zstd bomb (content size ${declare ? 'declared' : 'unknown'}): refused in ${ms.toFixed(1)} ms, RSS +${grewMb.toFixed(1)} MiB`);
    t.ok(ms < 3000, 'refused in under 3 s');
    t.ok(grewMb < 100, 'RSS grew by less than 100 MiB');
  }
});

t.test('a 1 GiB gzip bomb is refused quickly with little memory', async (t) => {
  // 64 gzip members of 16 MiB of zeros each: one stream of 1 GiB, about 1 MB on the wire.
  const bomb = Buffer.concat(Array(64).fill(zlib.gzipSync(Buffer.alloc(16 * MiB))));
  const rss0 = process.memoryUsage().rss;
  const t0 = performance.now();
  await t.rejects(decompress(bomb, 'gzip', { maxBytes: 32 * MiB }), { code: 'ERR_DECOMPRESSED_TOO_LARGE' });
  const ms = performance.now() - t0;
  const grewMb = (process.memoryUsage().rss - rss0) / MiB;
  t.comment(`gzip bomb (${bomb.length} bytes): refused in ${ms.toFixed(1)} ms, RSS +${grewMb.toFixed(1)} MiB`);
  t.ok(ms < 3000, 'refused in under 3 s');
  t.ok(grewMb < 100, 'RSS grew by less than 100 MiB');
});

t.test('a zip bomb is refused from its header, or while inflating when the header lies', async (t) => {
  const raw = zlib.deflateRawSync(Buffer.alloc(64 * MiB));
  const honest = makeZip([{ name: 'bomb', data: Buffer.alloc(0), raw, declaredSize: 64 * MiB, crc: 0 }]);
  const t0 = performance.now();
  await t.rejects(decompress(honest, 'zip', { maxBytes: MiB }), { code: 'ERR_DECOMPRESSED_TOO_LARGE' });
  t.ok(performance.now() - t0 < 100, 'refused without inflating');
  // Declared within the limit: yauzl stops at the declared size, and so would our own count.
  const lying = makeZip([{ name: 'bomb', data: Buffer.alloc(0), raw, declaredSize: MiB, crc: 0 }]);
  t.equal(await outcome(lying, 'zip', MiB), 'ERR_DECOMPRESS');
});

t.test('invalid limits are programming errors', async (t) => {
  await t.rejects(decompress(sample, 'none', { maxBytes: -1 }), RangeError);
  await t.rejects(decompress(sample, 'gzip', { maxBytes: 1.5 }), RangeError);
  await t.rejects(decompress(sample, 'zstd', {} as { maxBytes: number }), RangeError);
});

// --- corrupt input -------------------------------------------------------------------------------

t.test('corrupt, truncated or empty input is ERR_DECOMPRESS', async (t) => {
  const flip = (b: Buffer, at: number): Buffer => {
    const c = Buffer.from(b);
    c[at] = c[at]! ^ 0xff;
    return c;
  };
  const gz = compressSync(sample, 'gzip');
  const zst = compressSync(sample, 'zstd');
  const zip = makeZip([{ name: 'a', data: sample }]);
  const stored = makeZip([{ name: 'a', data: sample, method: 0 }]);
  const cases: Array<[string, EnvelopeCompression, Buffer]> = [
    ['gzip: empty', 'gzip', Buffer.alloc(0)],
    ['gzip: not gzip', 'gzip', sample],
    ['gzip: truncated', 'gzip', gz.subarray(0, gz.length >> 1)],
    ['gzip: missing trailer', 'gzip', gz.subarray(0, gz.length - 4)],
    ['gzip: CRC mismatch', 'gzip', flip(gz, gz.length - 6)],
    ['gzip: trailing garbage', 'gzip', Buffer.concat([gz, Buffer.from('garbage')])],
    ['zstd: empty', 'zstd', Buffer.alloc(0)],
    ['zstd: not zstd', 'zstd', sample],
    ['zstd: truncated', 'zstd', zst.subarray(0, zst.length >> 1)],
    ['zstd: last byte missing', 'zstd', zst.subarray(0, zst.length - 1)],
    ['zstd: checksum mismatch', 'zstd', flip(zst, zst.length - 1)],
    ['zstd: damaged block', 'zstd', flip(zst, zst.length >> 1)],
    ['zstd: trailing garbage', 'zstd', Buffer.concat([zst, Buffer.from('garbage')])],
    ['zip: empty', 'zip', Buffer.alloc(0)],
    ['zip: not zip', 'zip', sample],
    ['zip: truncated', 'zip', zip.subarray(0, zip.length >> 1)],
    ['zip: no entries', 'zip', makeZip([])],
    ['zip: only a directory', 'zip', makeZip([{ name: 'd/', data: Buffer.alloc(0), method: 0 }])],
    ['zip: stored data altered (CRC)', 'zip', flip(stored, 40)],
    ['zip: deflate data altered', 'zip', flip(zip, 40)],
    ['zip: encrypted entry', 'zip', makeZip([{ name: 'a', data: sample, flags: 1 }])],
    ['zip: unsupported method', 'zip', makeZip([{ name: 'a', data: sample, method: 12 as 8 }])],
  ];
  for (const [name, c, data] of cases) t.equal(await outcome(data, c), 'ERR_DECOMPRESS', name);
  t.equal(await outcome(sample, 'brotli' as EnvelopeCompression), 'ERR_DECOMPRESS', 'unknown envelope');
});

t.test('random and mutated input only ever produces a CapstanError or bounded output', async () => {
  const valid: Record<EnvelopeCompression, Buffer> = {
    none: sample,
    gzip: compressSync(sample, 'gzip'),
    zstd: compressSync(sample, 'zstd'),
    zip: makeZip([{ name: 'a', data: sample }]),
  };
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom<EnvelopeCompression>('gzip', 'zstd', 'zip'),
      fc.oneof(
        fc.uint8Array({ maxLength: 2048 }).map((b) => ({ random: Buffer.from(b) })),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }).map((sets) => ({ sets })),
      ),
      fc.nat(),
      async (c, input, cut) => {
        let data: Buffer;
        if ('random' in input) {
          data = input.random;
        } else {
          data = Buffer.from(valid[c]);
          for (const [at, v] of input.sets) data[at % data.length] = v;
          if (cut % 3 === 0) data = data.subarray(0, cut % data.length);
        }
        try {
          const out = await decompress(data, c, { maxBytes: 64 * 1024 });
          if (out.length > 64 * 1024) throw new Error('limit exceeded');
        } catch (err) {
          if (!(err instanceof CapstanError)) throw err;
        }
      },
    ),
    { numRuns: 600 },
  );
});
