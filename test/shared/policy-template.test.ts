/**
 * Templates (shared/src/policy/template.ts): mustache's syntax through mustache.js, strict about
 * undefined names (the error names the name and its line), the two escaping modes, RUDDER's
 * `${node.…}` form, refused partials, the limits, and renderParams. Then properties: no template
 * reaches Object.prototype, every rendering of random data and templates returns or throws a
 * coded error, and text without tags renders to itself.
 */
import t from 'tap';
import fc from 'fast-check';
import { isCapstanError, renderParams, renderTemplate, SecretRef, secretMarker, templateNames, TEMPLATE_LIMITS } from '@capstan/shared';
import { PARSE_CACHE_LIMITS, parseCacheSize, setParseCacheLimits } from '@capstan/shared/policy/template';

const data = {
  os: { name: 'debian', version: '12' }, list: ['a', 'b<'], users: [{ name: 'ann' }, { name: 'bob' }], yes: true, no: false, none: [], nothing: null, n: 3,
  node: { id: 'n1', hostname: 'web1', relay: 'root', properties: { owner: 'ops', dc: { dns: '10.0.0.1' }, pw: new SecretRef('pw') } },
};
const r = (s: string, mode: 'file' | 'text' = 'text') => renderTemplate(s, data, { mode });

t.test('mustache syntax: variables, sections, inverted sections, lists, raw, comments, delimiters', async (t) => {
  t.equal(r('{{os.name}} {{ os.version }}'), 'debian 12');
  t.equal(r('{{#list}}[{{.}}]{{/list}}'), '[a][b<]');
  t.equal(r('{{#users}}{{name}},{{/users}}'), 'ann,bob,');
  t.equal(r('{{#yes}}y{{/yes}}{{#no}}n{{/no}}{{#none}}e{{/none}}{{#nothing}}z{{/nothing}}'), 'y', 'false, [] and null render nothing');
  t.equal(r('{{^no}}not{{/no}}{{^none}} empty{{/none}}{{^yes}}x{{/yes}}'), 'not empty');
  t.equal(r('{{#os}}{{name}}/{{n}}{{/os}}'), 'debian/3', 'a name not in the section is looked up outside it');
  t.equal(r('{{! a comment }}ok'), 'ok');
  t.equal(r('{{=<% %>=}}<% os.name %> {{os.name}}'), 'debian {{os.name}}');
  t.equal(r('{{nothing}}|{{n}}|{{node.properties.dc}}'), '|3|{"dns":"10.0.0.1"}', 'null is empty, numbers and objects as JSON');
  t.equal(r('line\n  {{#yes}}\nx\n  {{/yes}}\nend'), 'line\nx\nend', 'standalone section tags leave no blank line (the spec)');
});

t.test('escaping: file mode follows the spec, text mode never escapes', async (t) => {
  t.equal(r('{{list.1}} {{{list.1}}} {{& list.1}}', 'file'), 'b&lt; b< b<');
  t.equal(r('{{list.1}} {{{list.1}}}', 'text'), 'b< b<');
});

t.test("RUDDER's ${node.…} variables; other ${…} stay as they are", async (t) => {
  t.equal(r('${node.properties[owner]} ${node.properties.owner} ${node.properties[dc][dns]} ${node.hostname}'), 'ops ops 10.0.0.1 web1');
  t.equal(r('echo ${HOME} $${node} ${sys.fqhost} ${node}'), 'echo ${HOME} $${node} ${sys.fqhost} ${node}');
  t.throws(() => r('a\n${node.properties[nope]}'), { code: 'ERR_TEMPLATE', details: { name: 'node.properties.nope', line: 2 } });
});

t.test('a name that resolves to nothing is an error naming it and its line, sections too', async (t) => {
  for (const [tpl, name, line] of [['{{missing}}', 'missing', 1], ['x\ny\n{{os.nope}}', 'os.nope', 3], ['{{#missing}}x{{/missing}}', 'missing', 1],
    ['\n{{^missing}}x{{/missing}}', 'missing', 2], ['{{{missing}}}', 'missing', 1], ['{{#users}}\n{{age}}{{/users}}', 'age', 2]] as const) {
    t.throws(() => r(tpl), { code: 'ERR_TEMPLATE', details: { name, line } }, tpl);
  }
  t.throws(() => r('{{#list}}'), { code: 'ERR_TEMPLATE', details: { line: 1 } }, 'a parse error is coded too');
  t.throws(() => r('{{> partial}}'), { code: 'ERR_TEMPLATE' }, 'partials are refused');
  t.throws(() => r('{{#node.properties.pw}}x{{/node.properties.pw}}'), { code: 'ERR_TEMPLATE' }, 'a secret opens no section');
  t.throws(() => r('x \uFFF9secret:pw\uFFFB'), { code: 'ERR_TEMPLATE' }, 'marker characters in the template itself');
  t.throws(() => renderTemplate('{{v}}', { v: '\uFFF9secret:pw\uFFFB' }), { code: 'ERR_TEMPLATE' }, 'marker characters in a value');
});

t.test('a secret renders as its marker, HTML-flagged where the file mode escapes', async (t) => {
  t.equal(r('p={{node.properties.pw}}'), `p=${secretMarker('pw')}`);
  t.equal(r('p={{node.properties.pw}} {{{node.properties.pw}}}', 'file'), `p=${secretMarker('pw', 'html')} ${secretMarker('pw')}`);
  t.throws(() => r('{{node.properties}}'), { code: 'ERR_TEMPLATE' }, 'an object holding a secret is not written whole');
});

t.test('every limit has its coded error', async (t) => {
  const limit = (tpl: string, d: unknown, limits: object, name: string) =>
    t.throws(() => renderTemplate(tpl, d, { limits }), { code: 'ERR_TEMPLATE_LIMIT', details: { limit: name } }, name);
  limit('x'.repeat(101), {}, { maxTemplateBytes: 100 }, 'maxTemplateBytes');
  limit('{{#l}}0123456789{{/l}}', { l: Array(20).fill(1) }, { maxOutputBytes: 55 }, 'maxOutputBytes');
  limit('{{#a}}{{#a}}{{#a}}x{{/a}}{{/a}}{{/a}}', { a: true }, { maxDepth: 2 }, 'maxDepth');
  limit('{{#l}}{{#l}}x{{/l}}{{/l}}', { l: Array(10).fill(1) }, { maxIterations: 50 }, 'maxIterations');
  limit('{{#l}}{{!c}}{{!c}}{{!c}}{{/l}}', { l: Array(100).fill(1) }, { maxSteps: 200 }, 'maxSteps');
  t.ok(TEMPLATE_LIMITS.maxOutputBytes >= 1024 * 1024);
});

t.test('the output cap stops rendering as soon as it is passed, not after', async (t) => {
  let reads = 0;
  // A list whose items count their reads: rendering must stop within a few items past the cap.
  const items = Array.from({ length: 10_000 }, () => ({ get v() { reads++; return 'xxxxxxxxxx'; } }));
  t.throws(() => renderTemplate('{{#items}}{{v}}{{/items}}', { items }, { limits: { maxOutputBytes: 100 } }), { code: 'ERR_TEMPLATE_LIMIT' });
  t.ok(reads <= 11, `stopped after ${reads} values`);
});

t.test('renderParams renders every string, keeps types of whole tags, and says what it read', async (t) => {
  const out = renderParams({ path: '/etc/{{node.hostname}}.conf', args: '{{list}}', n: '{{n}}', nested: { l: ['${node.properties.owner}', 7] }, pw: 'x={{node.properties.pw}}' }, data);
  t.same(out.params, { path: '/etc/web1.conf', args: ['a', 'b<'], n: 3, nested: { l: ['ops', 7] }, pw: `x=${secretMarker('pw')}` });
  t.same(out.reads, ['list', 'n', 'node.hostname', 'node.properties.owner', 'node.properties.pw']);
  t.same(out.secrets, ['pw']);
  t.throws(() => renderParams({ a: { b: '{{nope}}' } }, data), { code: 'ERR_TEMPLATE', details: { field: 'a.b', name: 'nope' } });
  t.same(templateNames('{{#params.l}}{{item.x}}{{/params.l}} ${node.properties[a][b]}'), ['params.l', 'item.x', 'node.properties.a.b']);
});

t.test('property: no template reaches a prototype member', async (t) => {
  const protoNames = ['constructor', '__proto__', 'toString', 'valueOf', 'hasOwnProperty', 'length', 'prototype', '__defineGetter__', 'isPrototypeOf'];
  fc.assert(fc.property(fc.constantFrom(...protoNames), fc.constantFrom('', 'os.', 'list.', 'users.0.', 'os.name.'), fc.constantFrom('{{%}}', '{{{%}}}', '{{#%}}x{{/%}}', '{{^%}}x{{/%}}', '${node.%}'),
    (name, prefix, form) => {
      const tpl = form.replaceAll('%', prefix + name);
      try {
        renderTemplate(tpl, data);
        return false;
      } catch (err) {
        return isCapstanError(err) && err.code === 'ERR_TEMPLATE';
      }
    }), { numRuns: 400 });
});

t.test('property: random data and templates render or fail with a coded error, within the limits', async (t) => {
  const json = fc.jsonValue({ maxDepth: 4 });
  const piece = fc.oneof(
    fc.string({ maxLength: 8 }), fc.constantFrom('{{', '}}', '{{{', '}}}', '{{#', '{{/', '{{^', '{{.}}', '{{a}}', '{{a.b}}', '{{#a}}', '{{/a}}', '{{#b}}', '{{/b}}', '{{=| |=}}', '{{!', '${node.x}', '\n'),
  );
  const limits = { maxOutputBytes: 4096, maxIterations: 200, maxSteps: 5000 };
  fc.assert(fc.property(fc.array(piece, { maxLength: 30 }).map((p) => p.join('')), fc.dictionary(fc.constantFrom('a', 'b', 'c', 'node'), json), fc.constantFrom('file', 'text'),
    (tpl, d, mode) => {
      try {
        const out = renderTemplate(tpl, d, { mode: mode as 'file' | 'text', limits });
        return typeof out === 'string' && Buffer.byteLength(out) <= limits.maxOutputBytes;
      } catch (err) {
        return isCapstanError(err) && (err.code === 'ERR_TEMPLATE' || err.code === 'ERR_TEMPLATE_LIMIT');
      }
    }), { numRuns: 1000 });
});

t.test('property: text without tags renders to itself', async (t) => {
  const plain = fc.string({ maxLength: 200, unit: 'grapheme' }).filter((s) => !s.includes('{{') && !s.includes('${node') && !/[\uFFF9\uFFFB]/.test(s));
  fc.assert(fc.property(plain, fc.constantFrom('file', 'text'), (s, mode) => renderTemplate(s, data, { mode: mode as 'file' | 'text' }) === s), { numRuns: 500 });
});

t.test('templates are parsed once and kept within bounds; every limit still holds at each use', async (t) => {
  const nested = '{{#a}}{{#a}}{{#a}}x{{/a}}{{/a}}{{/a}}';
  t.equal(renderTemplate(nested, { a: true }), 'x');
  t.throws(() => renderTemplate(nested, { a: true }, { limits: { maxDepth: 2 } }), { code: 'ERR_TEMPLATE_LIMIT', details: { limit: 'maxDepth' } }, 'a kept parse meets a lower depth limit');
  t.throws(() => renderTemplate(nested, { a: true }, { limits: { maxTemplateBytes: 10 } }), { code: 'ERR_TEMPLATE_LIMIT', details: { limit: 'maxTemplateBytes' } }, 'and a lower size limit');
  for (let i = 0; i < 2; i++) t.throws(() => renderTemplate('a {{> p}}', {}), { code: 'ERR_TEMPLATE', details: { line: 1 } }, 'a partial is refused every time');
  // Nested past any walk: refused by the limit, never by the stack.
  const deep = `${'{{#a}}'.repeat(20_000)}x${'{{/a}}'.repeat(20_000)}`;
  t.throws(() => renderTemplate(deep, { a: true }), { code: 'ERR_TEMPLATE_LIMIT', details: { limit: 'maxDepth' } });
  t.equal(renderTemplate(`${'{{#a}}'.repeat(1_100)}x${'{{/a}}'.repeat(1_100)}`, { a: true }, { limits: { maxDepth: 1_200 } }), 'x', 'a limit above the parse walk is the one applied');
  for (let i = 0; i < PARSE_CACHE_LIMITS.maxEntries + 100; i++) t.equal(renderTemplate(`{{n}} ${i}`, { n: 'v' }), `v ${i}`);
  t.equal(parseCacheSize().entries, PARSE_CACHE_LIMITS.maxEntries, 'at most maxEntries kept');
  // The byte bound, lowered for the test: parsing costs time in proportion to the text, and
  // passing the default 16 MiB takes mustache.js seconds per template.
  const before = setParseCacheLimits({ maxEntries: PARSE_CACHE_LIMITS.maxEntries, maxBytes: 1024 * 1024 });
  t.teardown(() => { setParseCacheLimits(before); });
  t.ok(parseCacheSize().bytes <= 1024 * 1024, 'lowering the bound trims what is held');
  const big = 300 * 1024;
  for (let i = 0; i < 6; i++) t.equal(renderTemplate(`{{n}}${String(i).repeat(big)}`, { n: '' }, { limits: { maxTemplateBytes: 512 * 1024 } }).length, big);
  t.ok(parseCacheSize().bytes <= 1024 * 1024, `at most maxBytes kept (${parseCacheSize().bytes})`);
  t.ok(parseCacheSize().bytes >= 3 * big, 'the newest big ones are kept');
});
