/**
 * Agent benchmark: one real `capstan-agent run` applying N file_content directives, against a
 * stand-in relay on loopback that serves a signed bundle and takes the uploads. Measures the
 * process's wall time and peak RSS (getrusage maxrss of the child, written at exit by a preload).
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { computeConfigId, signBundle, type BundleDirective } from '@capstan/shared/policy/bundle';

export interface AgentBenchResult {
  directives: number;
  wallMs: number;
  peakRssMb: number;
  repaired: number;
}

/** The agent's own command line, as built in its package. */
const CLI = fileURLToPath(import.meta.resolve('@capstan/agent/cli'));

function runCli(args: string[], rssFile: string): Promise<{ code: number | null; stdout: string; ms: number }> {
  const preload = `data:text/javascript,${encodeURIComponent(
    // VmHWM is this process's own peak: getrusage's maxrss can carry a large parent's figure
    // across fork+exec (seen when the bench ran from the 200 MB bench driver).
    `import {readFileSync, writeFileSync} from 'node:fs'; process.on('exit', () => writeFileSync(${JSON.stringify(rssFile)}, /VmHWM:\\s+(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]));`,
  )}`;
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...(process.env.AGENT_NODE_FLAGS ? process.env.AGENT_NODE_FLAGS.split(' ') : []), '--import', preload, CLI, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.once('error', reject);
    p.once('exit', (code) => resolve({ code, stdout, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
  });
}

export async function benchAgent(opts: { directives?: number } = {}): Promise<AgentBenchResult> {
  const n = opts.directives ?? 50;
  const dir = await mkdtemp(join(tmpdir(), 'capstan-agent-bench-'));
  const { privateKey } = generateKeyPairSync('ed25519');
  const key = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  let policy = '';
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'PUT') return res.writeHead(201).end('{}');
      if (req.url?.startsWith('/policies/') && policy) return res.writeHead(200, { etag: '"b1"' }).end(policy);
      res.writeHead(404).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const relay = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const state = join(dir, 'state');
    // error: the stand-in answers no token renewal (404), which the agent warns about each run.
    const args = ['run', '--relay', relay, '--state-dir', state, '--log-level', 'error'];
    // Warm-up run: makes the node key and sends the first inventory, as enrollment would.
    await runCli(args, join(dir, 'rss0'));
    const nodeId = (await readFile(join(state, 'node-id'), 'utf8')).trim();
    const directives: BundleDirective[] = Array.from({ length: n }, (_, i) => ({
      id: `d${i}`, name: `file ${i}`, method: 'file_content', params: { path: join(dir, 'files', `f${i}`), content: `content ${i}\n` }, mode: 'enforce', rule_id: 'bench',
    }));
    policy = JSON.stringify(signBundle({ node_id: nodeId, config_id: computeConfigId(directives), generated_at: new Date().toISOString(), directives }, key, { includePublicKey: true }));
    const rssFile = join(dir, 'rss');
    // Runs are told apart by their start second, so a run started in the warm-up's second waits
    // for the next one (agents run minutes apart; measured here, that wait made every other
    // figure ~600 ms longer). Start the measured run in a later second.
    const lastRun = Number((await readFile(join(state, 'last-run'), 'utf8')).trim());
    await new Promise((r) => setTimeout(r, Math.max(0, (Math.floor(lastRun / 1000) + 1) * 1000 - Date.now() + 5)));
    const r = await runCli(args, rssFile);
    if (r.code !== 0) throw new Error(`agent run exited ${r.code}: ${r.stdout}`);
    const maxRssKb = Number(await readFile(rssFile, 'utf8'));
    const repaired = Number(/(\d+) repaired/.exec(r.stdout)?.[1] ?? 0);
    return { directives: n, wallMs: Math.round(r.ms), peakRssMb: Math.round(maxRssKb / 102.4) / 10, repaired };
  } finally {
    await new Promise((r) => server.close(() => r(null)));
    await rm(dir, { recursive: true, force: true });
  }
}

// `node bench/dist/agent.js` prints one measurement.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  benchAgent({ directives: Number(process.argv[2] ?? 50) }).then((r) => process.stdout.write(`${JSON.stringify(r)}\n`));
}
