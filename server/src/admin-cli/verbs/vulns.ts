/**
 * `capstan vulns …`: vulnerabilities (docs/vulnerabilities.md): list, show a CVE or advisory with
 * the nodes it affects and why, one node's findings, the fixes that close most exposure, mutes,
 * the feeds' state and a refresh; `capstan score` the fleet's grade.
 */
import { Command, Option } from 'commander';
import type { Column } from '../output.js';
import { enc, type Verbs } from '../kit.js';

const LIST: Column[] = [
  ['id', (r) => r.id], ['cves', (r) => r.cves?.join(' ')], ['rating', (r) => r.rating], ['kev', (r) => (r.kev ? 'yes' : '')],
  ['epss', (r) => r.epss?.epss], ['nodes', (r) => r.nodes], ['muted_nodes', (r) => r.muted_nodes], ['summary', (r) => r.summary],
];
const reason = (m: any) => (m ? `${m.name} ${m.compared} ${m.listed ? 'listed' : `in [${m.range?.introduced ?? ''}, ${m.range?.fixed ?? m.range?.last_affected ?? ''})`}` : '');
const FINDINGS: Column[] = [
  ['advisory', (f) => f.advisory], ['cves', (f) => f.cves?.join(' ')], ['rating', (f) => f.rating], ['kev', (f) => (f.kev ? 'yes' : '')], ['package', (f) => f.package],
  ['version', (f) => f.version], ['fixed', (f) => f.fixed], ['reason', (f) => reason(f.match)], ['muted', (f) => f.muted?.mute ?? ''],
];
const NODES: Column[] = [['node_id', (f) => f.node_id], ...FINDINGS.filter(([n]) => n !== 'cves' && n !== 'kev')];
const FIXES: Column[] = [
  ['name', (r) => r.name], ['ecosystem', (r) => r.ecosystem], ['fixed', (r) => r.fixed], ['nodes', (r) => r.nodes?.length],
  ['advisories', (r) => r.advisories?.length], ['packages', (r) => r.packages?.join(' ')],
];
const MUTES: Column[] = [['id', (m) => m.id], ['target', (m) => m.target], ['groups', (m) => m.groups?.join(' ')], ['reason', (m) => m.reason], ['expires', (m) => m.expires], ['created_by', (m) => m.created_by]];
const FEEDS: Column[] = [
  ['name', (f) => f.name], ['kind', (f) => f.kind], ['source', (f) => f.source], ['imported_at', (f) => f.imported_at], ['feed_date', (f) => f.feed_date],
  ['stale', (f) => (f.stale ? 'yes' : '')], ['error', (f) => f.error],
];

export function vulnVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const v = program.command('vulns').description('vulnerabilities: list, show, node, fixes, mute, unmute, mutes, feeds, refresh');
  v.command('list').description('vulnerabilities with the nodes they affect, worst first')
    .addOption(new Option('--severity <rating>', 'at least this rating').choices(['low', 'medium', 'high', 'critical']))
    .option('--kev', 'only those in CISA KEV').option('--epss <p>', 'EPSS probability at least p (0–1)')
    .option('-q, --query <expr>', 'over nodes: a filter expression (docs/filters.md)').option('--muted', 'count muted findings too')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { severity?: string; kev?: boolean; epss?: string; query?: string; muted?: boolean };
      const query = { severity: o.severity, kev: o.kev ? 'true' : undefined, epss: o.epss, q: o.query, muted: o.muted ? 'true' : undefined };
      if (fmt === 'csv') return io.out((await api.get('/api/1/vulnerabilities', { ...query, format: 'csv' })).text);
      list(fmt, LIST, await api.all('/api/1/vulnerabilities', query));
    }));
  v.command('show <id>').description('a CVE or advisory id: its advisories and each node it affects, with the reason')
    .action(act(async (api, fmt, _c, id: string) => {
      const ans = (await api.get(`/api/1/vulnerabilities/${enc(id)}`)).body;
      if (fmt === 'json') return show(fmt, ans);
      const d = ans.data;
      io.out(`${d.id}: ${d.advisories.map((a: any) => `${a.id} (${a.rating ?? 'unrated'})`).join(', ')}; CVEs ${d.cves.join(' ') || '-'}; KEV ${d.kev ? `since ${d.kev.date_added}` : 'no'}; EPSS ${d.epss?.epss ?? '-'}; ${d.nodes} node(s)\n`);
      list(fmt, NODES, { data: d.findings });
    }));
  v.command('node <id>').description("one node's vulnerabilities, worst first, each with its reason")
    .action(act(async (api, fmt, _c, id: string) => {
      const ans = (await api.get(`/api/1/nodes/${enc(id)}/vulnerabilities`)).body;
      if (fmt === 'json') return show(fmt, ans);
      list(fmt, FINDINGS, { data: ans.data.findings });
    }));
  v.command('fixes').description('packages whose upgrade fixes most exposure').option('-q, --query <expr>', 'over nodes: a filter expression')
    .action(act(async (api, fmt, cmd) => list(fmt, FIXES, await api.all('/api/1/vulnerabilities/fixes', { q: (cmd.opts() as { query?: string }).query }))));
  v.command('mute <target>').description('mark a CVE or advisory as needing no action (kept and shown as muted)')
    .requiredOption('--reason <text>', 'why (required)').option('--group <id...>', 'only on nodes of these groups').option('--expires <date>', 'until this date or RFC 3339 time')
    .option('--id <id>', 'the mute\'s id (default: generated)')
    .action(act(async (api, fmt, cmd, target: string) => {
      const o = cmd.opts() as { reason: string; group?: string[]; expires?: string; id?: string };
      show(fmt, (await api.call('POST', '/api/1/vulnerabilities/mutes', { body: { target, reason: o.reason, ...(o.group && { groups: o.group }), ...(o.expires && { expires: o.expires }), ...(o.id && { id: o.id }) } })).body);
    }));
  v.command('unmute <mute-id>').description('remove a mute').action(act(async (api, _f, _c, id: string) => {
    await api.call('DELETE', `/api/1/vulnerabilities/mutes/${enc(id)}`);
    io.out(`removed mute ${id}\n`);
  }));
  v.command('mutes').description('the mutes').action(act(async (api, fmt) => list(fmt, MUTES, (await api.get('/api/1/vulnerabilities/mutes')).body)));
  v.command('feeds').description("each feed's state: last import, the feed's date, stale or not, last error")
    .action(act(async (api, fmt) => list(fmt, FEEDS, (await api.get('/api/1/vulnerabilities/feeds')).body)));
  v.command('refresh').description('import every feed now (admin); a first import of large feeds may need --timeout 600 or --no-wait')
    .option('--no-wait', 'start it and return; `capstan vulns feeds` shows how it went').action(act(async (api, fmt, cmd) => {
    if ((cmd.opts() as { wait: boolean }).wait === false) {
      show(fmt, (await api.call('POST', '/api/1/vulnerabilities/feeds/refresh', { query: { wait: 'false' } })).body);
      return;
    }
    const d = (await api.call('POST', '/api/1/vulnerabilities/feeds/refresh')).body;
    if (fmt === 'json') return show(fmt, d);
    io.out(`${d.data.changed} advisories changed (${d.data.withdrawn} withdrawn), ${d.data.nodes} nodes matched again\n`);
    list(fmt, FEEDS, { data: d.data.feeds });
  }));
  program.command('score').description("the fleet's grade (A–E) from compliance and exposure; --nodes for each node's")
    .option('-q, --query <expr>', 'over nodes: a filter expression').option('--nodes', "each node's grade too")
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { query?: string; nodes?: boolean };
      const ans = (await api.get('/api/1/score', { q: o.query, nodes: o.nodes ? 'true' : undefined })).body;
      if (fmt === 'json') return show(fmt, ans);
      const f = ans.data.fleet;
      io.out(`fleet grade ${f.grade ?? '-'} over ${f.nodes} node(s): ${Object.entries(f.by_grade).map(([g, n]) => `${g} ${n}`).join(', ')}\n`);
      if (ans.data.nodes) {
        list(fmt, [['node_id', (s) => s.node_id], ['grade', (s) => s.grade], ['compliance', (s) => s.compliance.percent], ['exposure_points', (s) => s.exposure.points],
          ['advisories', (s) => s.exposure.advisories], ['kev', (s) => s.exposure.kev]], { data: ans.data.nodes });
      }
    }));
}
