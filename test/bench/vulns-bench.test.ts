/**
 * The vulnerability benchmark runs end to end on a small fleet (the full one is
 * `npm run bench -- --only vulns`): it reports every figure, its generated nodes do meet
 * vulnerabilities, and the new advisory reaches only nodes having its package.
 */
import t from 'tap';
import { benchVulns } from '@capstan/bench/vulns';

t.test('the vulnerability benchmark reports its figures on a small fleet', async (t) => {
  const r = await benchVulns({ nodes: 400, advisories: 3000 });
  const fig = (prefix: string) => r.figures.find((f) => f.name.startsWith(prefix))!.value;
  t.ok(fig('full match:') >= 0 && fig('full match, CPU') >= 0);
  t.ok(fig('findings per node') > 0, 'generated nodes meet vulnerabilities');
  t.equal(fig('packages per node'), 550);
  t.equal(fig('nodes having its package'), 400, 'the new advisory is for a package every node has');
  const hit = fig('nodes the new advisory affects');
  t.ok(hit > 0 && hit < 400, `${hit} of 400 nodes have a version below its fix`);
});
