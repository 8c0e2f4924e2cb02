/** Plain-text tables for the admin verbs: a header row, columns padded to their widest cell. */
/** Wide enough for a sha256 fingerprint (64 hex digits), which an admin copies from the pending list. */
export const MAX_CELL = 64;

function cell(v: unknown): string {
  const s = v === null || v === undefined || v === '' ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  // One line per row, and a runaway value (a long tag list) does not push the rest off screen.
  const flat = s.replace(/[\r\n\t]+/g, ' ');
  return flat.length > MAX_CELL ? `${flat.slice(0, MAX_CELL - 1)}…` : flat;
}

export function table(columns: Array<[header: string, pick: (row: any) => unknown]>, rows: readonly unknown[]): string {
  const cells = rows.map((r) => columns.map(([, pick]) => cell(pick(r))));
  const widths = columns.map(([h], i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (values: string[]) => values.map((v, i) => (i === values.length - 1 ? v : v.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(columns.map(([h]) => h.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}
