/**
 * Global compliance over time, for the console's graph: every `history_interval` the managed
 * nodes' compliance (the figure GET /api/1/compliance answers) is appended as one JSON line to
 * <data_dir>/compliance-history.jsonl and kept in memory, `history_retention` long. A file, not a
 * table: it is a few hundred kB a month, read only by this process; servers sharing a database
 * each keep their own, and their points agree since they read the same registry.
 */
import { appendFile, readFile, rename, writeFile } from 'node:fs/promises';
import { percentages, type ComplianceCounts } from '@capstan/shared/compliance/compute';
import type { Logger } from '@capstan/shared/log';

export interface HistoryPoint {
  /** ISO 8601 UTC. */
  at: string;
  nodes: number;
  nodes_with_data: number;
  compliance: number | null;
  counts: ComplianceCounts;
}

export interface ComplianceHistoryOptions {
  file: string;
  intervalMs: number;
  retentionMs: number;
  summary: () => Promise<{ nodes: number; nodes_with_data: number; counts: ComplianceCounts }>;
  log: Logger;
  now?: () => Date;
}

export class ComplianceHistory {
  private points: HistoryPoint[] = [];
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();
  /** Lines in the file that are past retention: past as many as are kept, the file is rewritten. */
  private stale = 0;
  private readonly now: () => Date;

  constructor(private readonly opts: ComplianceHistoryOptions) {
    this.now = opts.now ?? (() => new Date());
  }

  /** Read what earlier runs recorded (a torn last line, after a crash, is skipped). */
  async load(): Promise<void> {
    let text = '';
    try {
      text = await readFile(this.opts.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const since = this.now().getTime() - this.opts.retentionMs;
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        const p = JSON.parse(line) as HistoryPoint;
        if (typeof p.at === 'string' && Date.parse(p.at) >= since && p.counts) this.points.push(p);
        else this.stale++;
      } catch {
        this.stale++;
      }
    }
    this.points.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  }

  /** Record now, then every interval (nothing when the interval is 0). */
  start(): void {
    if (this.opts.intervalMs <= 0 || this.timer) return;
    this.running = this.record();
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.record());
    }, this.opts.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Points with `from <= at < to` (ISO times; absent: unbounded), oldest first. */
  series(from?: string, to?: string): HistoryPoint[] {
    const f = from === undefined ? -Infinity : Date.parse(from);
    const t = to === undefined ? Infinity : Date.parse(to);
    return this.points.filter((p) => {
      const at = Date.parse(p.at);
      return at >= f && at < t;
    });
  }

  /** One point, now. Failures are logged: the graph has a gap, nothing else is affected. */
  async record(): Promise<void> {
    try {
      const s = await this.opts.summary();
      const point: HistoryPoint = { at: this.now().toISOString(), nodes: s.nodes, nodes_with_data: s.nodes_with_data, compliance: percentages(s.counts).compliance, counts: s.counts };
      this.points.push(point);
      const since = this.now().getTime() - this.opts.retentionMs;
      while (this.points.length > 0 && Date.parse(this.points[0]!.at) < since) {
        this.points.shift();
        this.stale++;
      }
      if (this.stale > this.points.length) {
        // Rewrite without the expired lines (temporary file, then rename: never a half file).
        await writeFile(`${this.opts.file}.tmp`, this.points.map((p) => `${JSON.stringify(p)}\n`).join(''), { mode: 0o600 });
        await rename(`${this.opts.file}.tmp`, this.opts.file);
        this.stale = 0;
      } else {
        await appendFile(this.opts.file, `${JSON.stringify(point)}\n`, { mode: 0o600 });
      }
    } catch (err) {
      this.opts.log.warn({ err }, 'compliance history not recorded');
    }
  }
}
