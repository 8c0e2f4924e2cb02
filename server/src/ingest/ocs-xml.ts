/**
 * The XML reader for OCS inventories: one linear pass over the text with indexOf and slice, into
 * plain objects (an element holding only text is its trimmed text; one holding elements is an
 * object of them, a name seen twice or named in `repeated` an array; attributes, comments and
 * processing instructions are checked and left out; CDATA is text).
 *
 * Why not a general parser: fast-xml-parser built every name and text a character at a time
 * (`s += c`). Profiled with --cpu-prof on generated inventories, 80–90% of the time was the
 * garbage collector walking those strings: 6.4 MB of text in one element cost 5–6 s, 10 MB of
 * ordinary packages 2.6 s, and a gzip'd inventory of 10 kB expanding to 8 MB of blanks held the
 * event loop 6 s (docs/capacity.md). Here the same inputs cost tens of milliseconds.
 *
 * Well-formedness is checked as it goes: one root element, each end tag closing the element open,
 * names and attributes of the XML grammar's shape, nothing but blanks outside the root, nothing
 * left open. DOCTYPEs and entity declarations are refused before (ocs.ts), and entities are
 * never expanded here (the mapping decodes the five predefined ones and character references).
 */

type Node = Record<string, unknown>;

interface Frame {
  name: string;
  obj: Node | null;
  text: string[];
}

export class XmlShapeError extends Error {}

const NAME = /^[A-Za-z_:\u00C0-\uFFFF][-A-Za-z0-9_:.\u00B7\u00C0-\uFFFF]*/;
/** What may follow a start tag's name: attributes `name="…"` / `name='…'` (no `<` in values), blanks. */
const ATTRIBUTES = /^(?:\s+[A-Za-z_:\u00C0-\uFFFF][-A-Za-z0-9_:.\u00B7\u00C0-\uFFFF]*\s*=\s*(?:"[^"<]*"|'[^'<]*'))*\s*$/;
const BLANK = /^\s*$/;

function bad(msg: string): never {
  throw new XmlShapeError(msg);
}

/** Index of the `>` closing the start tag at `from`, quoted attribute values skipped; -1 if none. */
export function startTagEnd(xml: string, from: number): number {
  let quote = 0;
  for (let i = from + 1; i < xml.length; i++) {
    const c = xml.charCodeAt(i);
    if (quote !== 0) {
      if (c === quote) quote = 0;
    } else if (c === 34 || c === 39) {
      quote = c;
    } else if (c === 62) {
      return i;
    }
  }
  return -1;
}

function close(f: Frame, parent: Frame, repeated: ReadonlySet<string>): void {
  const text = f.text.length === 0 ? '' : (f.text.length === 1 ? f.text[0]! : f.text.join('')).trim();
  let value: unknown = text;
  if (f.obj) {
    if (text.length > 0) f.obj['#text'] = text;
    value = f.obj;
  }
  const into = (parent.obj ??= {});
  const had = into[f.name];
  if (had === undefined) into[f.name] = repeated.has(f.name) ? [value] : value;
  else if (Array.isArray(had)) had.push(value);
  else into[f.name] = [had, value];
}

/** Read `xml` into its tree: `{ [rootName]: … }`. Throws XmlShapeError on what is not well-formed. */
export function readXmlTree(xml: string, repeated: ReadonlySet<string> = new Set()): Node {
  const top: Frame = { name: '', obj: null, text: [] };
  const stack: Frame[] = [top];
  let rooted = false;
  let i = 0;
  const n = xml.length;
  while (i < n) {
    const lt = xml.indexOf('<', i);
    const end = lt < 0 ? n : lt;
    if (end > i) {
      const text = xml.slice(i, end);
      if (stack.length === 1) {
        if (!BLANK.test(text)) bad('text outside the root element');
      } else {
        stack[stack.length - 1]!.text.push(text);
      }
    }
    if (lt < 0) break;
    const c = xml.charCodeAt(lt + 1);
    if (c === 33 /* ! */) {
      if (xml.startsWith('<!--', lt)) {
        const e = xml.indexOf('-->', lt + 4);
        if (e < 0) bad('a comment is not closed');
        i = e + 3;
      } else if (xml.startsWith('<![CDATA[', lt)) {
        const e = xml.indexOf(']]>', lt + 9);
        if (e < 0) bad('a CDATA section is not closed');
        if (stack.length === 1) bad('CDATA outside the root element');
        stack[stack.length - 1]!.text.push(xml.slice(lt + 9, e));
        i = e + 3;
      } else {
        bad('a declaration other than a comment or CDATA');
      }
      continue;
    }
    if (c === 63 /* ? */) {
      const e = xml.indexOf('?>', lt + 2);
      if (e < 0) bad('a processing instruction is not closed');
      i = e + 2;
      continue;
    }
    if (c === 47 /* / */) {
      const gt = xml.indexOf('>', lt + 2);
      if (gt < 0) bad('an end tag is not closed');
      const name = xml.slice(lt + 2, gt).trimEnd();
      const f = stack.pop()!;
      if (stack.length === 0) bad(`</${name.slice(0, 64)}> closes no element`);
      if (f.name !== name) bad(`</${name.slice(0, 64)}> closes <${f.name.slice(0, 64)}>`);
      close(f, stack[stack.length - 1]!, repeated);
      i = gt + 1;
      continue;
    }
    const gt = startTagEnd(xml, lt);
    if (gt < 0) bad('a start tag is not closed');
    const selfClosing = xml.charCodeAt(gt - 1) === 47;
    const inner = xml.slice(lt + 1, selfClosing ? gt - 1 : gt);
    const m = NAME.exec(inner);
    if (!m) bad(`a start tag without a name: <${inner.slice(0, 64)}`);
    const name = m[0];
    if (!ATTRIBUTES.test(inner.slice(name.length))) bad(`malformed attributes in <${name.slice(0, 64)}>`);
    if (stack.length === 1) {
      if (rooted) bad('more than one root element');
      rooted = true;
    }
    const f: Frame = { name, obj: null, text: [] };
    if (selfClosing) close(f, stack[stack.length - 1]!, repeated);
    else stack.push(f);
    i = gt + 1;
  }
  if (stack.length > 1) bad(`<${stack[stack.length - 1]!.name.slice(0, 64)}> is not closed`);
  if (!rooted) bad('no root element');
  return top.obj ?? {};
}
