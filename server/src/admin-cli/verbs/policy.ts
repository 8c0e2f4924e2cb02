/**
 * `capstan rules|directives|groups|techniques …` (one object at a time) and `capstan policy export|diff|apply`
 * (policy as code: a directory of files, its plan with the nodes it reaches, and its application).
 */
import { Command, Option } from 'commander';
import { EXIT, renderList, type Column } from '../output.js';
import { bodyFromFile, enc, int, type Verbs } from '../kit.js';
import { applyPlan, exportPolicy, planFor, planText, proposePlan } from '../policy.js';
import { writePolicyDir } from '../policy-files.js';
import { NODE_COLUMNS } from './nodes.js';

const POLICY_COLUMNS: Record<string, Column[]> = {
  directives: [['id', (d) => d.id], ['name', (d) => d.name], ['method', (d) => d.method], ['mode', (d) => d.mode], ['condition', (d) => d.condition]],
  groups: [['id', (g) => g.id], ['name', (g) => g.name], ['nodes', (g) => g.nodes?.length], ['filter', (g) => g.filter]],
  rules: [['id', (r) => r.id], ['name', (r) => r.name], ['directives', (r) => r.directives.join(',')], ['groups', (r) => r.groups.join(',')]],
  techniques: [['id', (t) => t.id], ['name', (t) => t.name], ['version', (t) => t.version], ['parameters', (t) => t.parameters.map((p: { name: string }) => p.name).join(',')],
    ['calls', (t) => t.calls.length], ['updated_at', (t) => t.updated_at]],
};

export function policyVerbs(program: Command, { act, list, show, io }: Verbs): void {
  for (const kind of ['rules', 'directives', 'groups', 'techniques'] as const) {
    const c = program.command(kind).description(`${kind}: list, show, create, update, delete${kind === 'groups' ? ', members' : ''}`);
    c.command('list').action(act(async (api, fmt) => list(fmt, POLICY_COLUMNS[kind]!, (await api.get(`/api/1/${kind}`)).body)));
    c.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/${kind}/${enc(id)}`)).body)));
    c.command('create <file>').description('create from a TOML or JSON file (the policy-as-code format)')
      .action(act(async (api, fmt, _c, file: string) => show(fmt, (await api.call('POST', `/api/1/${kind}`, { body: await bodyFromFile(file) })).body)));
    c.command('update <id> <file>').description('replace (or create) from a TOML or JSON file')
      .action(act(async (api, fmt, _c, id: string, file: string) => show(fmt, (await api.call('PUT', `/api/1/${kind}/${enc(id)}`, { body: await bodyFromFile(file) })).body)));
    c.command('delete <id>').action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/${kind}/${enc(id)}`);
      io.out(`deleted ${kind.slice(0, -1)} ${id}\n`);
    }));
    if (kind === 'groups') {
      c.command('members <id>').description('the group\'s accepted members, as the policy generator counts them')
        .option('--limit <n>', 'at most this many nodes', int('--limit'), 1000)
        .action(act(async (api, fmt, cmd, id: string) => list(fmt, NODE_COLUMNS, await api.all(`/api/1/groups/${enc(id)}/nodes`, {}, (cmd.opts() as { limit: number }).limit))));
    }
  }

  // ---- change requests
  const cr = program.command('change-requests').description('proposed policy changes: list, show, approve, reject, deploy');
  cr.command('list').addOption(new Option('--status <status>').choices(['open', 'approved', 'rejected', 'deployed']))
    .action(act(async (api, fmt, cmd) => {
      const status = (cmd.opts() as { status?: string }).status;
      list(fmt, [['id', (c) => c.id], ['title', (c) => c.title], ['status', (c) => c.status], ['author', (c) => c.author], ['nodes', (c) => c.nodes_total], ['created_at', (c) => c.created_at]],
        (await api.get('/api/1/change-requests', status ? { status } : {})).body);
    }));
  cr.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/change-requests/${enc(id)}`)).body)));
  for (const verb of ['approve', 'reject'] as const) {
    cr.command(`${verb} <id>`).option('-m, --comment <text>', 'the review\'s comment')
      .action(act(async (api, fmt, cmd, id: string) => {
        const comment = (cmd.opts() as { comment?: string }).comment;
        show(fmt, (await api.call('POST', `/api/1/change-requests/${enc(id)}/${verb}`, { body: comment ? { comment } : {} })).body);
      }));
  }
  cr.command('deploy <id>').description('apply exactly what was reviewed (refused when its objects changed since)')
    .action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/change-requests/${enc(id)}/deploy`, { body: {} })).body)));

  // ---- policy as code
  const policy = program.command('policy').description('policy as code: export, diff, apply a directory of TOML/JSON files');
  policy.command('export').description('write the server\'s directives, groups, rules, techniques, global properties and nodes\' own properties, one file each')
    .requiredOption('-d, --dir <dir>', 'the directory').addOption(new Option('--format <format>').choices(['toml', 'json']).default('toml'))
    .option('--force', 'replace the policy files already there')
    .action(act(async (api, _f, cmd) => {
      const o = cmd.opts() as { dir: string; format: 'toml' | 'json'; force?: boolean };
      const n = await writePolicyDir(o.dir, await exportPolicy(api), o.format, o.force === true);
      io.out(`wrote ${n} files to ${o.dir}\n`);
    }));
  const planOptions = (c: Command) => c.requiredOption('-f, --dir <dir>', 'the policy directory')
    .option('--prune', 'also delete the policy objects the files do not name (never a node\'s properties: only the nodes with a file are managed)')
    .option('--max-nodes <n>', 'list at most this many nodes (the server says 1000)', int('--max-nodes'));
  planOptions(policy.command('diff').description('what apply would change, and which nodes would get which new or changed directives'))
    .option('--detailed-exitcode', 'exit 7 when there are changes, 0 when none')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { dir: string; prune?: boolean; maxNodes?: number; detailedExitcode?: boolean };
      const plan = await planFor(api, o.dir, o.prune === true, o.maxNodes);
      if (fmt === 'json') io.out(`${JSON.stringify({ data: plan }, null, 2)}\n`);
      else if (fmt === 'csv') {
        io.out(renderList('csv', [['node_id', (r) => r.node_id], ['hostname', (r) => r.hostname], ['change', (r) => r.change], ['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id]],
          plan.nodes.flatMap((n) => (['added', 'changed', 'removed'] as const).flatMap((change) => n[change].map((r) => ({ ...n, change, ...r }))))));
      } else io.out(planText(plan));
      return o.detailedExitcode && plan.changes.length ? EXIT.CHANGES : EXIT.OK;
    }));
  planOptions(policy.command('apply').description('make the server match the directory (idempotent)'))
    .option('--dry-run', 'print the plan and change nothing')
    .option('--propose', 'propose the changes as one change request for another admin to review, instead of applying them')
    .option('--title <title>', 'the change request\'s title (--propose)')
    .option('--description <text>', 'the change request\'s description (--propose)')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { dir: string; prune?: boolean; maxNodes?: number; dryRun?: boolean; propose?: boolean; title?: string; description?: string };
      const plan = await planFor(api, o.dir, o.prune === true, o.maxNodes);
      if (fmt !== 'json') io.out(planText(plan));
      if (o.dryRun || plan.changes.length === 0) {
        if (fmt === 'json') io.out(`${JSON.stringify({ data: { ...plan, applied: [] } }, null, 2)}\n`);
        return;
      }
      if (o.propose) {
        const cr = await proposePlan(api, plan, o.title ?? `policy apply of ${o.dir}`, o.description);
        if (fmt === 'json') io.out(`${JSON.stringify({ data: { ...plan, change_request: cr } }, null, 2)}\n`);
        else io.out(`proposed change request ${cr.id} (${cr.status}): another admin approves it, then deploys it (capstan change-requests approve|deploy ${cr.id})\n`);
        return;
      }
      const applied: string[] = [];
      await applyPlan(api, plan, (c) => {
        applied.push(`${c.action} ${c.kind} ${c.id}`);
        if (fmt !== 'json') io.out(`applied: ${c.action} ${c.kind} ${c.id}\n`);
      });
      if (fmt === 'json') io.out(`${JSON.stringify({ data: { ...plan, applied } }, null, 2)}\n`);
      else io.out(`applied ${applied.length} changes; ${plan.nodes_total} nodes get a new policy\n`);
    }));
}
