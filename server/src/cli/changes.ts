/**
 * `capstan-server changes`: what the agents changed, as `GET /api/1/changes` lists it, filtered by
 * node, rule, directive, group, label and time; a table, each change with its diff, or the JSON.
 */
import type { Command } from 'commander';
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { table } from '../table.js';
import { collect, out, storeOptions, withStore, type CommonFlags } from './common.js';

/** "1d", "12h", "30m" before now, or an RFC 3339 time. */
function sinceTime(v: string): string {
  const ms = parseDuration(v);
  if (ms !== null) return new Date(Date.now() - ms).toISOString();
  return v;
}

export function changesCommand(program: Command): void {
  storeOptions(program.command('changes').description('what the agents changed, newest first (GET /api/1/changes)'))
    .option('--json', 'print the API\'s JSON instead of a table')
    .option('--node <id>', 'one node (repeat or comma-separate for several)', collect)
    .option('--rule <id>', 'one rule', collect)
    .option('--directive <id>', 'one directive', collect)
    .option('--group <id>', 'the members of a policy group', collect)
    .option('--label <label>', 'intentional or corrective')
    .option('--since <when>', 'changes since a duration ago ("1d", "2h") or an RFC 3339 time')
    .option('--until <when>', 'changes before a duration ago or an RFC 3339 time')
    .option('--show', 'print each change with its diff instead of a table')
    .option('--page <n>', 'page', (v: string) => Number(v), 1)
    .option('--per-page <n>', 'changes per page (at most 1000)', (v: string) => Number(v), 50)
    .action(async (flags: CommonFlags & { json?: boolean; node?: string[]; rule?: string[]; directive?: string[]; group?: string[]; label?: string; since?: string; until?: string; show?: boolean; page: number; perPage: number }) => {
      const { changeQuery } = await import('../api/routes/changes.js');
      await withStore(flags, async (store) => {
        const q = await changeQuery(store, {
          ...(flags.node && { node: flags.node }), ...(flags.rule && { rule: flags.rule }), ...(flags.directive && { directive: flags.directive }),
          ...(flags.group && { group: flags.group }), ...(flags.label && { label: flags.label }),
          ...(flags.since && { from: sinceTime(flags.since) }), ...(flags.until && { to: sinceTime(flags.until) }),
        });
        if (!Number.isInteger(flags.page) || flags.page < 1 || !Number.isInteger(flags.perPage) || flags.perPage < 1 || flags.perPage > 1000) {
          throw capstanError('ERR_BAD_REQUEST', '--page must be a positive integer and --per-page an integer from 1 to 1000');
        }
        const res = await store.listChanges(q, flags.page, flags.perPage);
        out(flags, { data: res.data, total: res.total }, () => {
          if (!flags.show) {
            return `${table([['at', (c) => c.at], ['node', (c) => c.node_id], ['label', (c) => c.label], ['rule', (c) => c.rule_id], ['directive', (c) => c.directive_id],
              ['component', (c) => c.component], ['key', (c) => c.key_value], ['message', (c) => c.message], ['diff', (c) => (c.diff === null ? '' : 'yes')]], res.data)}${res.total} changes\n`;
          }
          return `${res.data.map((c) => `${c.at} ${c.node_id} ${c.label} ${c.event_type}\n  rule ${c.rule_id} directive ${c.directive_id} component ${c.component} key ${c.key_value}\n  ${c.message}\n${c.diff === null ? '' : `${c.diff.replace(/^/gm, '    ')}${c.diff.endsWith('\n') ? '' : '\n'}`}`).join('\n')}${res.total} changes\n`;
        });
      });
    });
}
