/**
 * The remote-run wire protocol as the agent, the relay and the server read and write it: events as
 * lines, and the bounded line reader they all use on the listen connection and the output uploads.
 */
import t from 'tap';
import { Readable } from 'node:stream';
import { eventLine, jsonLines, LineReader, MAX_LINE, parseEventLine, REMOTE_RUN_PROTOCOL } from '@capstan/shared';

t.test('events are one JSON line each and read back by type', async (t) => {
  t.equal(REMOTE_RUN_PROTOCOL, 'capstan-remote-run');
  const hello = eventLine({ type: 'hello', node: 'n1', relay: 'root', heartbeat_ms: 30_000 });
  t.equal(hello, '{"type":"hello","node":"n1","relay":"root","heartbeat_ms":30000}\n');
  t.same(parseEventLine(hello.trim()), { type: 'hello', node: 'n1', relay: 'root', heartbeat_ms: 30_000 });
  t.same(parseEventLine(eventLine({ type: 'bye', reason: 'token_expired' }).trim()), { type: 'bye', reason: 'token_expired' });
  t.same(parseEventLine(eventLine({ type: 'run', id: 'c1', nodes: 'all', conditions: ['a'], keep_output: true }).trim()),
    { type: 'run', id: 'c1', nodes: 'all', conditions: ['a'], keep_output: true });
  for (const bad of ['', 'not json', '[1,2]', 'null', '"hello"', '{"type":1}', '{"no":"type"}']) t.equal(parseEventLine(bad), null, `${JSON.stringify(bad)} is no event`);
});

t.test('the reader splits across chunks, keeps UTF-8 whole and skips blank lines', async (t) => {
  const r = new LineReader();
  const text = Buffer.from('{"a":"é"}\n\n  \n{"b":2}\n{"c"');
  const at = text.indexOf(0xc3) + 1; // inside the two bytes of é
  t.same(r.push(text.subarray(0, at)), []);
  t.same(r.push(text.subarray(at)), ['{"a":"é"}', '{"b":2}']);
  t.same(r.push(':3}'), []);
  t.same(r.end(), ['{"c":3}'], 'the last line without a newline');
  t.same(r.end(), [], 'nothing twice');
});

t.test('a line still unfinished past the bound is dropped whole, the next one kept', async (t) => {
  const r = new LineReader(16);
  t.same(r.push('x'.repeat(10)), []);
  t.same(r.push('x'.repeat(10)), [], 'past the bound: dropped as it arrives');
  t.same(r.push('yyy\nok\n'), ['ok'], 'its tail is not taken for a line');
  t.same(r.push('z'.repeat(40)), []);
  t.same(r.end(), [], 'an overlong last line is dropped too');
  t.equal(MAX_LINE, 64 * 1024);
});

t.test('jsonLines reads a stream the same way', async (t) => {
  const chunks = ['{"type":"ping"}\n{"type":', '"bye"}\n', 'q'.repeat(60), `${'q'.repeat(40)}\n`, '{"type":"run","id":"x"}'];
  const got: string[] = [];
  for await (const line of jsonLines(Readable.from(chunks), 50)) got.push(line);
  t.same(got, ['{"type":"ping"}', '{"type":"bye"}', '{"type":"run","id":"x"}']);
});
