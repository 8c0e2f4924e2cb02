import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { fixturesAbsent } from '../helpers/programs.js';
import fc from 'fast-check';
import { compressionSuffix, inventoryFileName, isValidNodeId, parseInventoryName, parseRunInfo, runLogFileName, type Compression } from '@capstan/shared';
import { thrownCode } from '../helpers/thrown.js';

const RUDDER = path.resolve(import.meta.dirname, '../../../shared/conformance/rudder');
const absent = fixturesAbsent(RUDDER);
const E745 = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const COMPRESSIONS: [string, Compression][] = [['', 'none'], ['.gz', 'gzip'], ['.zip', 'zip'], ['.zst', 'zstd']];

/** Node ids as RUDDER makes them (UUIDs, root) and as the charset allows. */
const nodeIdArb = fc.oneof(
  fc.uuid(),
  fc.constant('root'),
  fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9-]{0,63}$/),
);
const dateArb = fc.date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true });

t.test('v1 and v2 names give node id, normalised timestamp and compression, for every suffix', async (t) => {
  const forms: [string, string, string, 'v1' | 'v2'][] = [
    ['2018-08-24T15:55:01+00:00@root.log', 'root', '2018-08-24T15:55:01+00:00', 'v1'],
    // Windows agents write `_` for `:`; relayd maps it back
    ['2018-08-24T15_55_01+00_00@root.log', 'root', '2018-08-24T15:55:01+00:00', 'v1'],
    [`2018-08-24T15:55:01+00:00@${E745}.log`, E745, '2018-08-24T15:55:01+00:00', 'v1'],
    ['2020-04-07T13:20:57+02:00@root.log', 'root', '2020-04-07T13:20:57+02:00', 'v1'],
    ['2018-08-24T15:55:01Z@root.log', 'root', '2018-08-24T15:55:01+00:00', 'v1'],
    [`${E745}_2024-03-05T12:00:00+00:00.log`, E745, '2024-03-05T12:00:00+00:00', 'v2'],
    [`${E745}_2024-03-05T12_00_00+00_00.log`, E745, '2024-03-05T12:00:00+00:00', 'v2'],
    ['root_2024-02-29T23:59:59+00:00.log', 'root', '2024-02-29T23:59:59+00:00', 'v2'],
  ];
  for (const [name, nodeId, timestamp, format] of forms) {
    for (const [suffix, compression] of COMPRESSIONS) {
      const fileName = name + suffix;
      t.same(parseRunInfo(fileName), { nodeId, timestamp, compression, format, fileName }, fileName);
    }
  }
});

t.test('every RUDDER fixture run-log name parses to the node id in its name', { skip: absent }, async (t) => {
  const dir = path.join(RUDDER, 'files/runlogs');
  const names = fs.readdirSync(dir).filter((f) => f.endsWith('.log'));
  t.ok(names.length > 0);
  for (const name of names) {
    const info = parseRunInfo(name);
    t.equal(info.nodeId, name.slice(name.indexOf('@') + 1, -4), name);
    t.equal(info.timestamp.replaceAll(':', '_'), name.slice(0, name.indexOf('@')), name);
  }
});

t.test('names that are not run logs or could escape a directory are rejected with ERR_RUNINFO_NAME', async (t) => {
  const bad = [
    '', 'bob.log', '@{.log', '>@.log', '.log', '@.log', 'root.log', 'root_.log', '_2018-08-24T15:55:01+00:00.log',
    // relayd's own test: an empty node id, and `.lg.gz`
    '2018-08-24T15:55:01+00:00@.log', '2018-08-24T15:55:01+00:00@root.lg.gz',
    // not real dates or times
    '2018-02-30T15:55:01+00:00@root.log', '2018-13-01T15:55:01+00:00@root.log', '2019-02-29T15:55:01+00:00@root.log',
    '2018-08-24T24:00:00+00:00@root.log', '2018-08-24T15:60:01+00:00@root.log', '2018-08-24 15:55:01+00:00@root.log',
    '2018-08-24T15:55:01@root.log', '2018-08-24T15:55:01+24:00@root.log', '2018-8-24T15:55:01+00:00@root.log',
    'root_2018.log', 'root_yesterday.log',
    // path tricks
    '2018-08-24T15:55:01+00:00@../root.log', '2018-08-24T15:55:01+00:00@a/b.log', '2018-08-24T15:55:01+00:00@a\\b.log',
    '2018-08-24T15:55:01+00:00@.root.log', '2018-08-24T15:55:01+00:00@ro\0ot.log', '../root_2018-08-24T15:55:01+00:00.log',
    '2018-08-24T15:55:01+00:00@-root.log', '2018-08-24T15:55:01+00:00@ro ot.log', '2018-08-24T15:55:01+00:00@r@oot.log',
    '2018-08-24T15:55:01+00:00@root.x.log', `2018-08-24T15:55:01+00:00@${'a'.repeat(65)}.log`,
    // wrong or extra suffixes (WebDAV temporary files, unsupported compressions)
    '2018-08-24T15:55:01+00:00@root.log.xz', '2018-08-24T15:55:01+00:00@root.log.gz.gz',
    '2018-08-24T15:55:01+00:00@root.log.davfs.tmp123', '2018-08-24T15:55:01+00:00@root.LOG', '2018-08-24T15:55:01+00:00@root.gz',
    `${'2'.repeat(256)}.log`,
  ];
  for (const name of bad) t.equal(thrownCode(() => parseRunInfo(name)), 'ERR_RUNINFO_NAME', JSON.stringify(name));
  t.equal(thrownCode(() => parseRunInfo(undefined as unknown as string)), 'ERR_RUNINFO_NAME', 'not a string');
});

t.test('the fuzz crash inputs of relayd are rejected as names, not crashes', { skip: absent }, async (t) => {
  const dir = path.join(RUDDER, '_extra/fuzz/artifacts/runinfo');
  const files = fs.readdirSync(dir);
  t.equal(files.length, 2);
  for (const file of files) {
    const name = fs.readFileSync(path.join(dir, file), 'utf8');
    t.equal(thrownCode(() => parseRunInfo(name)), 'ERR_RUNINFO_NAME', JSON.stringify(name));
  }
});

t.test('any string is either a safe run-log name or ERR_RUNINFO_NAME', async (t) => {
  const fragments = fc.constantFrom('@', '_', '.log', '.gz', '.zip', '.zst', '..', '/', '\\', '\0', 'root', ':', '+00:00',
    '2018-08-24T15:55:01+00:00', '2018-08-24T15_55_01+00_00', 'T', 'Z', '-');
  const names = fc.oneof(fc.string(), fc.array(fragments, { maxLength: 8 }).map((a) => a.join('')));
  fc.assert(fc.property(names, (name) => {
    let info;
    try {
      info = parseRunInfo(name);
    } catch (err) {
      return (err as { code?: string }).code === 'ERR_RUNINFO_NAME';
    }
    return isValidNodeId(info.nodeId) && !/[/\\\0]/.test(info.fileName) && !info.fileName.startsWith('.');
  }), { numRuns: 3000 });
  t.pass('only safe names or ERR_RUNINFO_NAME');
});

t.test('runLogFileName writes v1 UTC names, with `_` for `:` on request', async (t) => {
  const date = new Date('2018-08-24T15:55:01.789Z');
  t.equal(runLogFileName('root', date, 'none'), '2018-08-24T15:55:01+00:00@root.log');
  t.equal(runLogFileName(E745, date, 'zstd'), `2018-08-24T15:55:01+00:00@${E745}.log.zst`);
  t.equal(runLogFileName('root', date, 'gzip', { underscore: true }), '2018-08-24T15_55_01+00_00@root.log.gz');
  t.equal(thrownCode(() => runLogFileName('../x', date, 'none')), 'ERR_RUNINFO_NAME');
  t.equal(thrownCode(() => runLogFileName('root', new Date(Number.NaN), 'none')), 'ERR_RUNINFO_NAME');
  t.equal(thrownCode(() => runLogFileName('root', new Date('+010000-01-01T00:00:00Z'), 'none')), 'ERR_RUNINFO_NAME');
});

t.test('written run-log names parse back to the same node, second and compression', async (t) => {
  const compressions = fc.constantFrom<Compression>('none', 'gzip', 'zip', 'zstd');
  fc.assert(fc.property(nodeIdArb, dateArb, compressions, fc.boolean(), (nodeId, date, compression, underscore) => {
    const info = parseRunInfo(runLogFileName(nodeId, date, compression, { underscore }));
    const second = new Date(Math.floor(date.getTime() / 1000) * 1000).toISOString().slice(0, 19);
    return info.nodeId === nodeId && info.compression === compression && info.format === 'v1'
      && info.timestamp === `${second}+00:00`;
  }));
  t.pass('round trip holds');
});

t.test('compressionSuffix maps each compression to its file suffix', async (t) => {
  for (const [suffix, compression] of COMPRESSIONS) t.equal(compressionSuffix(compression), suffix);
});

t.test('inventory names give node id, UTC timestamp and compression', async (t) => {
  const cases: [string, Compression][] = [['.json', 'none'], ['.json.zst', 'zstd'], ['.json.gz', 'gzip']];
  for (const [suffix, compression] of cases) {
    for (const stamp of ['2024-03-05T12:00:00+00:00', '2024-03-05T12_00_00+00_00', '2024-03-05T12:00:00Z']) {
      const fileName = `${E745}_${stamp}${suffix}`;
      t.same(parseInventoryName(fileName), { nodeId: E745, timestamp: '2024-03-05T12:00:00+00:00', compression, fileName, format: 'json', signature: false });
    }
  }
  // RUDDER agents: `<uuid>_<date --utc --iso-8601=seconds>.ocs[.gz]`, and the `.sign` beside it.
  const ocs: [string, Compression, boolean][] = [['.ocs', 'none', false], ['.ocs.gz', 'gzip', false], ['.ocs.sign', 'none', true]];
  for (const [suffix, compression, signature] of ocs) {
    const fileName = `${E745}_2024-03-05T12:00:00+00:00${suffix}`;
    t.same(parseInventoryName(fileName), { nodeId: E745, timestamp: '2024-03-05T12:00:00+00:00', compression, fileName, format: 'ocs', signature });
  }
  const date = new Date('2024-03-05T12:00:00Z');
  t.equal(inventoryFileName('root', date, 'zstd'), 'root_2024-03-05T12:00:00+00:00.json.zst');
  t.equal(inventoryFileName('root', date, 'none', { underscore: true }), 'root_2024-03-05T12_00_00+00_00.json');
});

t.test('invalid inventory names are rejected with ERR_INVENTORY_NAME', async (t) => {
  const bad = [
    '', 'root.json', 'root_2024-03-05T12:00:00+00:00.json.zip', 'root_2024-03-05T12:00:00+02:00.json',
    'root_2024-03-05T12:00:00+00:00.xml', 'root_2024-03-05T12:00:00+00:00.json.gz.tmp', '../root_2024-03-05T12:00:00+00:00.json',
    'ro/ot_2024-03-05T12:00:00+00:00.json', 'root_2024-02-30T12:00:00+00:00.json', '_2024-03-05T12:00:00+00:00.json',
    '2024-03-05T12:00:00+00:00@root.log',
    'root_2024-03-05T12:00:00+00:00.ocs.zst', 'root_2024-03-05T12:00:00+00:00.ocs.gz.sign', 'root_2024-03-05T12:00:00+00:00.ocs.xml',
    'web1-e745a140-40bc-4b86-b6dc-084488fc906b.ocs', 'root_2024-03-05T12:00:00+02:00.ocs',
  ];
  for (const name of bad) t.equal(thrownCode(() => parseInventoryName(name)), 'ERR_INVENTORY_NAME', JSON.stringify(name));
  t.equal(thrownCode(() => inventoryFileName('a.b', new Date(), 'none')), 'ERR_INVENTORY_NAME');
  t.equal(thrownCode(() => inventoryFileName('root', new Date(), 'zip' as 'none')), 'ERR_INVENTORY_NAME');
});

t.test('written inventory names parse back to the same node, second and compression', async (t) => {
  const compressions = fc.constantFrom<'none' | 'zstd' | 'gzip'>('none', 'zstd', 'gzip');
  fc.assert(fc.property(nodeIdArb, dateArb, compressions, (nodeId, date, compression) => {
    const info = parseInventoryName(inventoryFileName(nodeId, date, compression));
    return info.nodeId === nodeId && info.compression === compression
      && info.timestamp === `${new Date(Math.floor(date.getTime() / 1000) * 1000).toISOString().slice(0, 19)}+00:00`;
  }));
  t.pass('round trip holds');
});
