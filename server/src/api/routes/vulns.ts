/**
 * Admin API: vulnerabilities (docs/vulnerabilities.md, docs/api.md). Viewers read; operators
 * mute; admins refresh the feeds.
 *   GET    /api/1/vulnerabilities                 ?severity=&kev=&epss=&q=&muted=&page=&per_page=&format=csv
 *   GET    /api/1/vulnerabilities/fixes           ?q=&format=csv: packages whose upgrade fixes most exposure
 *   GET    /api/1/vulnerabilities/feeds           each feed's state (stale or not)
 *   POST   /api/1/vulnerabilities/feeds/refresh   import every feed now (joins one running); ?wait=false: 202 at once
 *   GET    /api/1/vulnerabilities/mutes           POST {id?, target, groups?, reason, expires?}; DELETE …/mutes/<id>
 *   GET    /api/1/vulnerabilities/<id>            a CVE or advisory id: its nodes, each with its reason
 *   GET    /api/1/vulnerabilities/<id>/plan       packages to upgrade and nodes exposed (what a campaign needs)
 *   GET    /api/1/nodes/<id>/vulnerabilities      one node's findings, worst first
 *   GET    /api/1/score                           ?q=: the fleet's grade and each node's; GET /api/1/nodes/<id>/score
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { ComplianceClock } from '../../reads.js';
import { fixPlan } from '../../vulns/fix-plan.js';
import { checkMute } from '../../vulns/mute.js';
import { fleetScore, nodeScores } from '../../vulns/score.js';
import type { VulnService } from '../../vulns/service.js';
import { fixesView, listView, nodeView, RATINGS, showView, type FixRow, type ViewDeps, type VulnListQuery, type VulnListRow } from '../../vulns/views.js';
import { actorOf } from '../actor.js';
import { exportFormat, sendRows } from '../export.js';
import { boolParam, paging, single, type Query } from '../params.js';

const bad = (message: string): never => {
  throw capstanError('ERR_BAD_REQUEST', message);
};

function known(q: Query, names: readonly string[]): void {
  const unknown = Object.keys(q).find((k) => !names.includes(k));
  if (unknown !== undefined) bad(`unknown parameter ${unknown}`);
}

export function vulnListQuery(q: Query): VulnListQuery {
  known(q, ['severity', 'kev', 'epss', 'q', 'muted', 'page', 'per_page', 'format']);
  const severity = single(q, 'severity');
  if (severity !== undefined && !(RATINGS as readonly string[]).includes(severity)) bad(`severity must be one of ${RATINGS.join(', ')}`);
  const epssText = single(q, 'epss');
  const epss = epssText === undefined ? undefined : Number(epssText);
  if (epss !== undefined && !(epss >= 0 && epss <= 1)) bad('epss must be a probability from 0 to 1');
  const kev = boolParam(q, 'kev');
  const muted = boolParam(q, 'muted');
  const expr = single(q, 'q');
  return {
    ...(severity !== undefined && { severity: severity as VulnListQuery['severity'] }), ...(kev !== undefined && { kev }), ...(epss !== undefined && { epss }),
    ...(muted !== undefined && { muted }), ...(expr !== undefined && { filters: [{ key: 'q', values: [expr] }] }),
  };
}

const LIST_CSV: ReadonlyArray<readonly [string, (r: VulnListRow) => unknown]> = [
  ['id', (r) => r.id], ['cves', (r) => r.cves.join(' ')], ['rating', (r) => r.rating], ['kev', (r) => r.kev !== null], ['kev_due_date', (r) => r.kev?.due_date],
  ['epss', (r) => r.epss?.epss], ['epss_percentile', (r) => r.epss?.percentile], ['nodes', (r) => r.nodes], ['muted_nodes', (r) => r.muted_nodes], ['summary', (r) => r.summary],
];

const FIX_CSV: ReadonlyArray<readonly [string, (r: FixRow) => unknown]> = [
  ['name', (r) => r.name], ['ecosystem', (r) => r.ecosystem], ['fixed', (r) => r.fixed], ['nodes', (r) => r.nodes.length],
  ['advisories', (r) => r.advisories.join(' ')], ['packages', (r) => r.packages.join(' ')],
];

export interface VulnRouteDeps extends ViewDeps {
  service: VulnService;
  clock: () => ComplianceClock;
}

export function vulnRoutes(app: FastifyInstance, deps: VulnRouteDeps): void {
  app.get<{ Querystring: Query }>('/api/1/vulnerabilities', async (req, reply) => {
    const format = exportFormat(req);
    const rows = await listView(deps, vulnListQuery(req.query));
    if (format === 'csv') {
      if (req.query.page !== undefined || req.query.per_page !== undefined) bad('a CSV export is not paged: it holds every vulnerability selected');
      return sendRows(reply, 'csv', 'vulnerabilities', LIST_CSV, async function* () {
        yield rows;
      });
    }
    const { page, per_page } = paging(req.query, 100);
    return { data: rows.slice((page - 1) * per_page, page * per_page), total: rows.length };
  });

  app.get<{ Querystring: Query }>('/api/1/vulnerabilities/fixes', async (req, reply) => {
    known(req.query, ['q', 'format', 'page', 'per_page']);
    const format = exportFormat(req);
    const expr = single(req.query, 'q');
    const rows = await fixesView(deps, expr === undefined ? {} : { filters: [{ key: 'q', values: [expr] }] });
    if (format === 'csv') {
      return sendRows(reply, 'csv', 'vulnerability-fixes', FIX_CSV, async function* () {
        yield rows;
      });
    }
    const { page, per_page } = paging(req.query, 100);
    return { data: rows.slice((page - 1) * per_page, page * per_page), total: rows.length };
  });

  app.get('/api/1/vulnerabilities/feeds', async () => ({ data: await deps.service.feedStatus() }));
  app.post<{ Querystring: Query }>('/api/1/vulnerabilities/feeds/refresh', async (req, reply) => {
    // wait=false: answer at once (a first import of large feeds outlasts a client's patience).
    if (boolParam(req.query, 'wait') === false) {
      deps.service.refresh().catch((err: unknown) => deps.service.deps.log.warn({ err }, 'vulnerability feed refresh failed'));
      return reply.code(202).send({ data: { started: true } });
    }
    return { data: await deps.service.refresh() };
  });

  app.get('/api/1/vulnerabilities/mutes', async () => {
    const data = await deps.store.vulns.listMutes();
    return { data, total: data.length };
  });
  app.post('/api/1/vulnerabilities/mutes', async (req, reply) => {
    const body = await readJson(req);
    const o = body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
    const unknown = Object.keys(o).find((k) => !['id', 'target', 'groups', 'reason', 'expires'].includes(k));
    if (unknown !== undefined) throw capstanError('ERR_MUTE_INVALID', `mute ${unknown} is not a field`, { details: { field: unknown } });
    return reply.code(201).send({ data: await deps.service.addMute(checkMute({ id: `m-${randomBytes(6).toString('hex')}`, ...o }), actorOf(req).name) });
  });
  app.delete<{ Params: { id: string } }>('/api/1/vulnerabilities/mutes/:id', async (req) => {
    await deps.service.deleteMute(req.params.id);
    return { data: { id: req.params.id, deleted: true } };
  });

  app.get<{ Params: { id: string } }>('/api/1/vulnerabilities/:id', async (req) => ({ data: await showView(deps, req.params.id) }));
  app.get<{ Params: { id: string } }>('/api/1/vulnerabilities/:id/plan', async (req) => ({ data: await fixPlan(deps, req.params.id) }));

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/vulnerabilities', async (req) => {
    if (!(await deps.store.getNode(req.params.id))) throw capstanError('ERR_NOT_FOUND', `node ${req.params.id} is unknown`);
    return { data: await nodeView(deps, req.params.id) };
  });

  app.get<{ Querystring: Query }>('/api/1/score', async (req) => {
    known(req.query, ['q', 'nodes']);
    const expr = single(req.query, 'q');
    const scores = await nodeScores({ ...deps, clock: deps.clock() }, expr === undefined ? [] : [{ key: 'q', values: [expr] }]);
    return { data: { fleet: fleetScore(scores), ...(boolParam(req.query, 'nodes') === true && { nodes: scores }) } };
  });
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/score', async (req) => {
    const [s] = await nodeScores({ ...deps, clock: deps.clock() }, [{ key: 'id', values: [req.params.id] }]);
    if (!s) throw capstanError('ERR_NOT_FOUND', `node ${req.params.id} is unknown or not accepted`);
    return { data: s };
  });
}
