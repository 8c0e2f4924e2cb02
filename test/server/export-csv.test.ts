/**
 * CSV exports are opened in spreadsheets: a cell that would start a formula is made text. Only
 * quoting it was not enough (spreadsheets still evaluated `"=cmd()"`); it is prefixed with `'`.
 */
import t from 'tap';
import { csvField, csvLine } from '@capstan/server/api/export';

/** The cell's text as a spreadsheet reads it (RFC 4180 unquoting of one field). */
function unquote(field: string): string {
  return field.startsWith('"') ? field.slice(1, -1).replace(/""/g, '"') : field;
}

t.test('a cell a spreadsheet would evaluate starts with an apostrophe', async (t) => {
  const hostile = [
    '=cmd|" /C calc"!A0', '+1+1', '-2+3', '@SUM(A1)', '\t=1', '\r=1', ' =1+1', '\u00a0=1', '\uFF1D1+1', '\uFF0B1', '\uFF0D1', '\uFF20A1',
    '=HYPERLINK("http://x","y")', '  @x',
  ];
  for (const v of hostile) {
    const text = unquote(csvField(v));
    t.ok(text.startsWith("'"), `${JSON.stringify(v)} → ${JSON.stringify(text)}`);
    t.equal(text.slice(1), v, 'the value is otherwise kept');
  }
});

t.test('ordinary cells and numbers are left as they are', async (t) => {
  t.equal(csvField('web1'), 'web1');
  t.equal(csvField(-5), '-5', 'a number is a number');
  t.equal(csvField(0.25), '0.25');
  t.equal(csvField('a,b'), '"a,b"', 'RFC 4180 quoting');
  t.equal(csvField('say "x"'), '"say ""x"""');
  t.equal(csvField(null), '');
  t.equal(csvLine(['id', '=1', 2]), `id,"'=1",2\r\n`);
});
