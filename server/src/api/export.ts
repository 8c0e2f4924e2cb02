/**
 * Exports: CSV (RFC 4180) or JSON, chosen by `?format=csv|json` or the Accept header, streamed
 * so that a 100,000-node export holds one page of rows in memory, not the whole answer.
 */
import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';

export type ExportFormat = 'json' | 'csv';

/** The format asked for: `format` wins over Accept; JSON by default. */
export function exportFormat(req: FastifyRequest<{ Querystring: Record<string, string | string[] | undefined> }>): ExportFormat {
  const f = req.query.format;
  if (f !== undefined) {
    if (f !== 'csv' && f !== 'json') throw capstanError('ERR_BAD_REQUEST', 'format must be csv or json');
    return f;
  }
  return /\btext\/csv\b/.test(req.headers.accept ?? '') ? 'csv' : 'json';
}

/**
 * Text a spreadsheet would take for a formula: a leading = + - @ (or their full-width forms),
 * after any spaces, or a leading tab or carriage return. Quoting such a cell is not enough: the
 * spreadsheet unquotes it and evaluates it.
 */
const FORMULA = /^[\s\u00a0]*[=+\-@\uFF1D\uFF0B\uFF0D\uFF20]|^[\t\r]/;

/**
 * One CSV field: quoted when it holds a comma, quote or line break; a string a spreadsheet would
 * evaluate is prefixed with `'` (which makes it text) and quoted. Numbers are written as they are.
 */
export function csvField(v: unknown): string {
  let s = v === null || v === undefined ? '' : String(v);
  if (typeof v === 'string' && FORMULA.test(s)) s = `'${s}`;
  return /[",\r\n]|^'/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export const csvLine = (fields: readonly unknown[]) => `${fields.map(csvField).join(',')}\r\n`;

/**
 * Send rows page by page: `pages` yields arrays of rows; `columns` names each CSV column and how
 * to read it. JSON answers `{"data": [...], "total": N}` like every list.
 */
export function sendRows<T>(
  reply: FastifyReply, format: ExportFormat, name: string,
  columns: ReadonlyArray<readonly [string, (row: T) => unknown]>, pages: () => AsyncGenerator<T[]>,
  json: (row: T) => unknown = (r) => r,
): FastifyReply {
  async function* body(): AsyncGenerator<string> {
    let total = 0;
    if (format === 'csv') {
      yield csvLine(columns.map((c) => c[0]));
      for await (const page of pages()) {
        let chunk = '';
        for (const row of page) chunk += csvLine(columns.map((c) => c[1](row)));
        if (chunk) yield chunk;
      }
      return;
    }
    yield '{"data":[';
    for await (const page of pages()) {
      let chunk = '';
      for (const row of page) chunk += `${total++ === 0 ? '' : ','}${JSON.stringify(json(row))}`;
      if (chunk) yield chunk;
    }
    yield `],"total":${total}}`;
  }
  reply.header('content-type', format === 'csv' ? 'text/csv; charset=utf-8' : 'application/json; charset=utf-8');
  if (format === 'csv') reply.header('content-disposition', `attachment; filename="${name}.csv"`);
  return reply.send(Readable.from(body(), { objectMode: false }));
}
