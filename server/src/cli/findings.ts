/**
 * `capstan-server findings`: the audit non-compliances and errors of nodes' components, as
 * `GET /api/1/findings` lists them (open, closed or both; by node, rule, directive, filter
 * expression and age), newest first; a table, each finding with its diff, or the JSON.
 */
import type { Command } from 'commander';
import { capstanError } from '@capstan/shared/errors';
import { table } from '../table.js';
import { collect, out, storeOptions, withStore, type CommonFlags } from './common.js';

interface FindingFlags extends CommonFlags {
  json?: boolean; open?: boolean; closed?: boolean; kind?: string; node?: string[]; rule?: string[]; directive?: string[];
  query?: string; minAge?: string; show?: boolean; page: number; perPage: number;
}

export function findingsCommand(program: Command): void {
  storeOptions(program.command('findings').description('audit non-compliances and errors, open or closed, newest first (GET /api/1/findings)'))
    .option('--json', 'print the API\'s JSON instead of a table')
    .option('--open', 'open findings only')
    .option('--closed', 'closed findings only')
    .option('--kind <kind>', 'non_compliant or error')
    .option('--node <id>', 'one node (repeat or comma-separate for several)', collect)
    .option('--rule <id>', 'one rule', collect)
    .option('--directive <id>', 'one directive', collect)
    .option('-q, --query <expression>', 'nodes chosen with the filter language (docs/filters.md)')
    .option('--min-age <duration>', 'first seen at least this long ago ("1d", "2h")')
    .option('--show', 'print each finding with its message and diff instead of a table')
    .option('--page <n>', 'page', (v: string) => Number(v), 1)
    .option('--per-page <n>', 'findings per page (at most 1000)', (v: string) => Number(v), 50)
    .action(async (flags: FindingFlags) => {
      const { findingQuery } = await import('../api/routes/findings.js');
      await withStore(flags, async (store) => {
        if (flags.open && flags.closed) throw capstanError('ERR_BAD_REQUEST', '--open and --closed exclude each other (give neither for both)');
        if (!Number.isInteger(flags.page) || flags.page < 1 || !Number.isInteger(flags.perPage) || flags.perPage < 1 || flags.perPage > 1000) {
          throw capstanError('ERR_BAD_REQUEST', '--page must be a positive integer and --per-page an integer from 1 to 1000');
        }
        const q = findingQuery({
          ...(flags.open && { status: 'open' }), ...(flags.closed && { status: 'closed' }), ...(flags.kind && { kind: flags.kind }),
          ...(flags.node && { node: flags.node }), ...(flags.rule && { rule: flags.rule }), ...(flags.directive && { directive: flags.directive }),
          ...(flags.query !== undefined && { q: flags.query }), ...(flags.minAge && { min_age: flags.minAge }),
        });
        const res = await store.listFindings(q, flags.page, flags.perPage);
        out(flags, { data: res.data, total: res.total }, () => {
          if (!flags.show) {
            return `${table([['status', (f) => f.status], ['kind', (f) => f.kind], ['node', (f) => f.node_id], ['rule', (f) => f.rule_id],
              ['directive', (f) => f.directive_id], ['component', (f) => f.component], ['first seen', (f) => f.first_seen_at], ['runs', (f) => f.runs],
              ['closed', (f) => f.closed_at ?? ''], ['reason', (f) => f.close_reason ?? ''], ['message', (f) => f.message]], res.data)}${res.total} findings\n`;
          }
          return `${res.data.map((f) => `${f.status} ${f.kind} ${f.node_id} since ${f.first_seen_at}, ${f.runs} runs${f.closed_at ? `, closed ${f.closed_at} (${f.close_reason})` : ''}
  rule ${f.rule_id} directive ${f.directive_id} component ${f.component} key ${f.key_value}
  ${f.message}
${f.diff === null ? '' : `${f.diff.replace(/^/gm, '    ')}${f.diff.endsWith('\n') ? '' : '\n'}`}`).join('\n')}${res.total} findings\n`;
        });
      });
    });
}
