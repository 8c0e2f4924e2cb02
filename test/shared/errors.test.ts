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
