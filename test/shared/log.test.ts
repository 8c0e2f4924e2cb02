/**
 * The logger options every program uses. Lines used to carry pino's level number (30, 40…) and,
 * for every logged coded error, its stack, so an agent waiting for acceptance printed stack traces;
 * the relay's reload line also carried `level` twice (pino's and the new log level).
 */
import { Writable } from 'node:stream';
import t from 'tap';
import { pino } from 'pino';
import { capstanError, logOptions } from '@capstan/shared';

function capture(level = 'trace') {
  const lines: Array<Record<string, any>> = [];
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      raw.push(chunk.toString());
      lines.push(JSON.parse(chunk.toString()));
      done();
    },
  });
  return { log: pino(logOptions('capstan-test', level, pino.stdSerializers.err), sink), lines, raw };
}

t.test('level names, program, and errors: coded ones without a stack, others with theirs', async (t) => {
  const { log, lines, raw } = capture();
  log.info('hello');
  log.warn({ err: capstanError('ERR_NODE_PENDING', 'node n1 is not accepted yet') }, 'no token yet');
  log.error({ err: new TypeError('x is undefined') }, 'crash');
  log.error({ err: capstanError('ERR_INTERNAL', 'a bug') }, 'internal');
  log.child({ file: 'f' }).debug({ n: 1 }, 'child');
  log.warn({ err: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED', syscall: 'connect', errno: -111 }) }, 'upstream down');
  t.same(lines.map((l) => l.level), ['info', 'warn', 'error', 'error', 'debug', 'warn']);
  t.ok(lines.every((l) => l.program === 'capstan-test'));
  t.same(lines[1]!.err, { type: 'CapstanError', code: 'ERR_NODE_PENDING', message: 'node n1 is not accepted yet' });
  t.match(lines[2]!.err, { type: 'TypeError', message: 'x is undefined', stack: /TypeError: x is undefined\n\s+at / });
  t.match(lines[3]!.err, { code: 'ERR_INTERNAL', stack: /\n\s+at / }, 'ERR_INTERNAL is a bug: its stack stays');
  t.equal(lines[4]!.file, 'f');
  t.same(lines[5]!.err, { type: 'Error', code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:9', syscall: 'connect' }, 'a refused system call: no stack');
  for (const line of raw) {
    const keys = [...line.matchAll(/"([a-zA-Z_]+)":/g)].map((m) => m[1]);
    t.same(keys.filter((k, i) => keys.indexOf(k) !== i && !/^(type|message|code|stack)$/.test(k!)), [], `no key twice: ${line.slice(0, 60)}`);
  }
});

t.test('the configured level still filters', async (t) => {
  const { log, lines } = capture('warn');
  log.info('quiet');
  log.warn('loud');
  t.same(lines.map((l) => l.msg), ['loud']);
});
