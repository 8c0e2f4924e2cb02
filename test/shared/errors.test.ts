import t from 'tap';
import { capstanError, isTransient, errorBody } from '@capstan/shared';

t.test('codes carry their status and transience', async (t) => {
  const e = capstanError('ERR_SPOOL_FULL', 'spool is full');
  t.equal(e.statusCode, 507);
  t.equal(isTransient(e), true);
  t.equal(isTransient(capstanError('ERR_SMIME_SIGNATURE', 'bad')), false);
  t.same(errorBody(e), { error: { code: 'ERR_SPOOL_FULL', message: 'spool is full' } });
  t.same(errorBody(new Error('secret')), { error: { code: 'ERR_INTERNAL', message: 'internal error' } });
});

t.test('any error that is not a Capstan error is transient: the file is kept and retried, never failed', async (t) => {
  const sys = (code: string) => Object.assign(new Error(code), { code });
  // Codes that look permanent elsewhere (a PostgreSQL constraint violation, a bad file name) are
  // still retried: only a Capstan error can send a file to failed/.
  for (const err of [sys('ECONNRESET'), sys('ENOSPC'), sys('23505'), sys('22P02'), sys('EINVAL'), sys('SQLITE_CONSTRAINT'),
    new TypeError('x is undefined'), 'a thrown string', null, undefined, { code: 42 }]) {
    t.equal(isTransient(err), true, String((err as { code?: unknown } | null)?.code ?? err));
  }
  t.equal(isTransient(capstanError('ERR_SMIME_SIGNATURE', 'bad', { cause: sys('ECONNRESET') })), false, 'a Capstan error decides, whatever its cause');
});
