/**
 * The text edits of file_block_present, file_key_value, ini_value and file_replace: pure
 * functions from the current text (null: no file) to the wanted one (null: nothing wanted, the
 * file may stay absent). A file whose lines the edit leaves as they are comes back unchanged, byte
 * for byte (CR line ends and a missing final newline included), so an edit never repairs what it
 * does not manage; changed files end with a newline.
 */
import { capstanError } from '@capstan/shared/errors';
import { paramError, separatorCore, type FileBlockParams, type FileKeyValueParams, type FileReplaceParams, type IniValueParams } from '@capstan/shared/policy/methods';
import { matchingLines, replaceAll } from './regex.js';

export function splitLines(text: string): string[] {
  if (text === '') return [];
  return (text.endsWith('\n') ? text.slice(0, -1) : text).split('\n');
}

/** The lines as text, or `cur` itself when they are its lines. */
function joined(cur: string | null, before: string[], after: string[]): string {
  if (cur !== null && before.length === after.length && before.every((l, i) => l === after[i])) return cur;
  return after.length === 0 ? '' : `${after.join('\n')}\n`;
}

/** A line as compared: without a CR line end and surrounding blanks. */
const bare = (l: string) => l.replace(/\r$/, '').trim();

/** The line end lines written into a file get: CR LF when its first line ends so. */
const crOf = (lines: string[]) => (lines[0]?.endsWith('\r') ? '\r' : '');

/**
 * The block between its markers, once: an existing pair is replaced in place (later pairs are
 * removed), a new block goes after the last line matching insert_after, before the first line
 * matching insert_before, or at the end.
 */
export function editBlock(cur: string | null, p: FileBlockParams, path: string): string | null {
  if (cur === null && p.state === 'absent') return null;
  const lines = splitLines(cur ?? '');
  const [begin, end] = [p.marker_begin.trim(), p.marker_end.trim()];
  const pairs: Array<[number, number]> = [];
  let open = -1;
  lines.forEach((l, i) => {
    const b = bare(l);
    if (b === begin) {
      if (open >= 0) throw capstanError('ERR_FILE_MARKERS', `${path}: line ${i + 1} begins block ${p.name} again before its end marker`);
      open = i;
    } else if (b === end) {
      if (open < 0) throw capstanError('ERR_FILE_MARKERS', `${path}: line ${i + 1} ends block ${p.name}, which has not begun`);
      pairs.push([open, i]);
      open = -1;
    }
  });
  if (open >= 0) throw capstanError('ERR_FILE_MARKERS', `${path}: block ${p.name} begins on line ${open + 1} and never ends`);
  const cr = crOf(lines);
  const block = p.state === 'present' ? [p.marker_begin, ...p.lines, p.marker_end].map((l) => `${l}${cr}`) : [];
  const out = [...lines];
  if (pairs.length > 0) {
    for (const [b, e] of pairs.slice(1).reverse()) out.splice(b, e - b + 1);
    const [b, e] = pairs[0]!;
    const noCr = (ls: string[]) => ls.map((l) => l.replace(/\r$/, '')).join('\n');
    // The same block with another line end (the last line of a file without a final newline) is the same block.
    if (noCr(out.slice(b, e + 1)) !== noCr(block)) out.splice(b, e - b + 1, ...block);
  } else if (p.state === 'present') {
    let at = out.length;
    if (p.insert_after !== undefined) {
      const hits = matchingLines(out, p.insert_after, `insert_after on ${path}`);
      if (hits.length > 0) at = hits[hits.length - 1]! + 1;
    } else if (p.insert_before !== undefined) {
      const hits = matchingLines(out, p.insert_before, `insert_before on ${path}`);
      if (hits.length > 0) at = hits[0]!;
    }
    out.splice(at, 0, ...block);
  }
  return joined(cur, lines, out);
}

interface KeyLine {
  indent: string;
  key: string;
  value: string;
}

/**
 * The reader of setting lines: a line's key (its first key_fields fields, or what is before the
 * separator) and value; null for blank lines, comments and lines without a separator.
 */
function keyLines(p: FileKeyValueParams): (line: string) => KeyLine | null {
  const core = separatorCore(p.separator);
  const fields = new RegExp(`^(\\S+(?:[ \\t]+\\S+){${p.key_fields - 1}})(?:[ \\t]+(.*))?$`);
  return (line) => {
    const s = line.replace(/\r$/, '');
    const t = s.trimStart();
    if (t === '' || t.startsWith(p.comment)) return null;
    const indent = s.slice(0, s.length - t.length);
    if (core === '') {
      const m = fields.exec(t);
      return m ? { indent, key: m[1]!, value: (m[2] ?? '').trim() } : null;
    }
    const at = t.indexOf(core);
    return at < 0 ? null : { indent, key: t.slice(0, at).trim(), value: t.slice(at + core.length).trim() };
  };
}

/**
 * Keys set in place (their first uncommented line; later lines of the same key removed, so that
 * neither "first wins" (sshd) nor "last wins" (sysctl) files can disagree), absent keys' lines
 * removed, missing keys added at the end, or before the first line matching insert_before, which
 * also ends the part of the file that is managed (sshd_config's first Match block).
 */
export function editKeyValues(cur: string | null, p: FileKeyValueParams, path: string): string | null {
  const lines = splitLines(cur ?? '');
  const norm = (k: string) => (p.case_insensitive ? k.toLowerCase() : k).split(/[ \t]+/).join(' ');
  const wanted = new Map(Object.entries(p.values).map(([k, v]) => [norm(k), { k, v }]));
  const absent = new Set(p.absent.map(norm));
  let stop = lines.length;
  if (p.insert_before !== undefined) stop = matchingLines(lines, p.insert_before, `insert_before on ${path}`)[0] ?? lines.length;
  const seen = new Set<string>();
  const out: string[] = [];
  const cr = crOf(lines);
  const keyLine = keyLines(p);
  for (const line of lines.slice(0, stop)) {
    const kl = keyLine(line);
    const n = kl === null ? undefined : norm(kl.key);
    if (kl === null || n === undefined || (!absent.has(n) && !wanted.has(n))) out.push(line);
    else if (absent.has(n) || seen.has(n)) continue;
    else {
      seen.add(n);
      const w = wanted.get(n)!;
      out.push(kl.value === w.v ? line : `${kl.indent}${w.k}${p.separator}${w.v}${cr}`);
    }
  }
  const missing = [...wanted.entries()].filter(([n]) => !seen.has(n)).map(([, w]) => `${w.k}${p.separator}${w.v}${cr}`);
  if (cur === null && missing.length === 0) return null;
  return joined(cur, lines, [...out, ...missing, ...lines.slice(stop)]);
}

const SECTION = /^\s*\[([^\]]*)\]\s*$/;

/**
 * One key of one section: set in place (first line; later ones in the section removed) or added
 * after the section's last setting, the section appended when missing; `state: absent` removes the
 * key's lines from the section. Only the first section of that name is managed.
 */
export function editIni(cur: string | null, p: IniValueParams): string | null {
  if (cur === null && p.state === 'absent') return null;
  const lines = splitLines(cur ?? '');
  const core = separatorCore(p.separator);
  const cr = crOf(lines);
  const setting = `${p.key}${p.separator}${p.value}${cr}`;
  const headers = lines.flatMap((l, i) => (SECTION.test(l.replace(/\r$/, '')) ? [i] : []));
  let start = 0;
  if (p.section !== '') {
    const h = headers.find((i) => SECTION.exec(lines[i]!.replace(/\r$/, ''))![1]!.trim() === p.section);
    if (h === undefined) {
      if (p.state === 'absent') return cur;
      const gap = lines.length > 0 && bare(lines[lines.length - 1]!) !== '' ? [cr] : [];
      return joined(cur, lines, [...lines, ...gap, `[${p.section}]${cr}`, setting]);
    }
    start = h + 1;
  }
  const end = headers.find((i) => i >= start) ?? lines.length;
  const isKey = (l: string) => {
    const t = bare(l);
    if (t === '' || t.startsWith('#') || t.startsWith(';')) return false;
    const at = t.indexOf(core);
    return at >= 0 && t.slice(0, at).trim() === p.key;
  };
  const region: string[] = [];
  let found = false;
  for (const line of lines.slice(start, end)) {
    if (!isKey(line)) region.push(line);
    else if (p.state === 'present' && !found) {
      found = true;
      const t = bare(line);
      const value = t.slice(t.indexOf(core) + core.length).trim();
      region.push(value === p.value ? line : `${line.slice(0, line.length - line.trimStart().length)}${setting}`);
    }
  }
  if (p.state === 'present' && !found) {
    // After the section's last non-blank line, so the blank line before the next section stays.
    let at = region.length;
    while (at > 0 && bare(region[at - 1]!) === '') at--;
    region.splice(at, 0, setting);
  }
  return joined(cur, lines, [...lines.slice(0, start), ...region, ...lines.slice(end)]);
}

/**
 * Every match replaced. A replacement that the pattern would change again is refused before
 * anything is written: applied on every run, it would never converge (`a` → `aa`).
 */
export function editReplace(cur: string, p: FileReplaceParams, path: string): string {
  const what = `pattern on ${path}`;
  const next = replaceAll(cur, p.pattern, p.flags, p.replacement, what);
  if (next !== cur && replaceAll(next, p.pattern, p.flags, p.replacement, what) !== next) {
    paramError('file_replace', 'replacement', 'is not idempotent: the pattern would change the replaced text again on the next run (make the pattern not match what it writes)');
  }
  return next;
}
