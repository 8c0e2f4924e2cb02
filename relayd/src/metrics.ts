/** Counters relayd exposes on GET /metrics in the Prometheus text format. */
import type { SpoolKind } from '@capstan/shared';

type Outcome = 'forwarded' | 'failed' | 'retry';

export class Metrics {
  private readonly receivedFiles = new Map<SpoolKind, number>();
  private readonly receivedBytes = new Map<SpoolKind, number>();
  private readonly outcomes = new Map<string, number>();

  constructor(private readonly spoolDepth: () => Promise<Record<SpoolKind, number>>) {}

  received(kind: SpoolKind, bytes: number): void {
    this.receivedFiles.set(kind, (this.receivedFiles.get(kind) ?? 0) + 1);
    this.receivedBytes.set(kind, (this.receivedBytes.get(kind) ?? 0) + bytes);
  }

  outcome(kind: SpoolKind, outcome: Outcome): void {
    const k = `${kind}\0${outcome}`;
    this.outcomes.set(k, (this.outcomes.get(k) ?? 0) + 1);
  }

  async render(): Promise<string> {
    const lines: string[] = [];
    lines.push('# HELP capstan_relayd_received_files_total Files accepted into the spool.');
    lines.push('# TYPE capstan_relayd_received_files_total counter');
    for (const [kind, n] of this.receivedFiles) lines.push(`capstan_relayd_received_files_total{kind="${kind}"} ${n}`);
    lines.push('# HELP capstan_relayd_received_bytes_total Bytes accepted into the spool.');
    lines.push('# TYPE capstan_relayd_received_bytes_total counter');
    for (const [kind, n] of this.receivedBytes) lines.push(`capstan_relayd_received_bytes_total{kind="${kind}"} ${n}`);
    lines.push('# HELP capstan_relayd_processed_files_total Spooled files by outcome.');
    lines.push('# TYPE capstan_relayd_processed_files_total counter');
    for (const [k, n] of this.outcomes) {
      const [kind, outcome] = k.split('\0');
      lines.push(`capstan_relayd_processed_files_total{kind="${kind}",outcome="${outcome}"} ${n}`);
    }
    lines.push('# HELP capstan_relayd_spool_files Files waiting in the spool.');
    lines.push('# TYPE capstan_relayd_spool_files gauge');
    for (const [kind, n] of Object.entries(await this.spoolDepth())) lines.push(`capstan_relayd_spool_files{kind="${kind}"} ${n}`);
    return `${lines.join('\n')}\n`;
  }
}
