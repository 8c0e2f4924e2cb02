/**
 * Builds a run log in RUDDER's report format: control start, one report per check, control end,
 * every line stamped. The start report's key is the policy's config id, which the server uses to
 * match expected against received reports.
 */
import { formatReport } from '@capstan/shared/runlog/format';
import { type Report } from '@capstan/shared/runlog/report';

export interface RunContext {
  nodeId: string;
  configId: string;
  /** The run's start, shared by every report (RUDDER's ExecutionTimeStamp). */
  startedAt: Date;
  clock: () => Date;
  /** Applied to every message, key and component written: takes every secret opened in the run out. */
  redact?: (text: string) => string;
}

export type ReportInput = Pick<Report, 'policy' | 'event_type' | 'rule_id' | 'directive_id' | 'component' | 'key_value' | 'msg'>;

/** RFC 3339 in UTC with an explicit "+00:00" offset, second precision, as RUDDER's timestamper writes. */
export function rfc3339(d: Date): string {
  return `${d.toISOString().slice(0, 19)}+00:00`;
}

export class RunLogWriter {
  private readonly lines: string[] = [];
  private readonly counts: Record<string, number> = {};
  private readonly added: Array<Pick<Report, 'event_type' | 'rule_id' | 'directive_id' | 'component'>> = [];

  constructor(private readonly ctx: RunContext) {}

  add(input: ReportInput): void {
    const x = this.ctx.redact;
    const r = x ? { ...input, msg: x(input.msg), key_value: x(input.key_value), component: x(input.component) } : input;
    const report: Report = {
      ...r,
      node_id: this.ctx.nodeId,
      report_id: '0',
      start_datetime: rfc3339(this.ctx.startedAt),
      execution_datetime: rfc3339(this.ctx.clock()),
    };
    this.counts[r.event_type] = (this.counts[r.event_type] ?? 0) + 1;
    this.lines.push(formatReport(report));
    this.added.push({ event_type: r.event_type, rule_id: r.rule_id, directive_id: r.directive_id, component: r.component });
  }

  /**
   * An agent log line (CFEngine's level tags, as RUDDER agents write them). It becomes a log_warn /
   * log_info report attached to the next report, so it must be followed by one.
   */
  log(level: 'info' | 'warning' | 'error', msg: string): void {
    const tag = level === 'info' ? '    info' : level === 'warning' ? ' warning' : '   error';
    const oneLine = (this.ctx.redact ? this.ctx.redact(msg) : msg).replace(/[\r\n]+/g, ' ');
    this.lines.push(`${rfc3339(this.ctx.clock())} ${tag}: ${oneLine}`);
  }

  start(): void {
    this.add({ policy: 'Common', event_type: 'control', rule_id: 'rudder', directive_id: 'run', component: 'start', key_value: this.ctx.configId, msg: 'Start execution' });
  }

  end(): void {
    this.add({ policy: 'Common', event_type: 'control', rule_id: 'rudder', directive_id: 'run', component: 'end', key_value: this.ctx.configId, msg: 'End execution' });
  }

  get configId(): string {
    return this.ctx.configId;
  }

  get reportCounts(): Readonly<Record<string, number>> {
    return this.counts;
  }

  /** The reports written so far, as far as compliance reads them (log lines aside: they are information). */
  get reports(): ReadonlyArray<Pick<Report, 'event_type' | 'rule_id' | 'directive_id' | 'component'>> {
    return this.added;
  }

  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}
