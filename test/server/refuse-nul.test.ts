/**
 * The store's U+0000 check (input.ts refuseNul) names where it found one: the path of the value
 * from the argument, a key holding one by the value it is a key of; a clean value passes,
 * however large.
 */
import t from 'tap';
import { refuseNul } from '@capstan/server/store/input';

const named = (value: unknown, path?: string): string | null => {
  try {
    refuseNul(value, path);
    return null;
  } catch (err) {
    t.equal((err as { code?: string }).code, 'ERR_BAD_REQUEST');
    return (err as Error).message;
  }
};

t.test('clean values pass', async (t) => {
  t.equal(named({ a: [1, 'x', { b: null }], m: new Map([['k', 'v']]) }), null);
  t.equal(named(Array.from({ length: 100_000 }, (_, i) => ({ id: `n${i}`, groups: ['a', 'b'] }))), null);
  t.equal(named(Buffer.from([0, 0])), null, 'a Buffer is not text');
});

t.test('a NUL is named by its path', async (t) => {
  t.equal(named('a\u0000b'), 'a value contains a NUL character');
  t.equal(named('a\u0000b', 'hostname'), 'hostname contains a NUL character');
  t.equal(named({ tags: { env: 'a\u0000' } }), 'tags.env contains a NUL character');
  t.equal(named({ tags: { env: 'a\u0000' } }, 'patch'), 'patch.tags.env contains a NUL character');
  t.equal(named({ list: ['ok', 'b\u0000'] }), 'list.1 contains a NUL character');
  t.equal(named([{ x: 1 }, { y: ['z\u0000'] }]), '1.y.0 contains a NUL character');
  t.equal(named(new Map([['k', { v: 'x\u0000' }]])), 'k.v contains a NUL character');
});

t.test('a NUL in a key names the value it is a key of', async (t) => {
  t.equal(named({ counts: { 'result\u0000': 1 } }), 'counts contains a NUL character');
  t.equal(named({ 'k\u0000': 1 }), 'a value contains a NUL character');
  t.equal(named({ 'k\u0000': 1 }, 'fields'), 'fields contains a NUL character');
  t.equal(named(new Map([['a', new Map([['b\u0000', 1]])]])), 'a contains a NUL character');
});

t.test('deeper than the bound is left to the database', async (t) => {
  let deep: unknown = 'x\u0000';
  for (let i = 0; i < 40; i++) deep = { d: deep };
  t.equal(named(deep), null);
  let shallow: unknown = 'x\u0000';
  for (let i = 0; i < 5; i++) shallow = { d: shallow };
  t.equal(named(shallow), 'd.d.d.d.d contains a NUL character');
});
