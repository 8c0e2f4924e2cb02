/**
 * What a message says: the webhook's JSON body (every event whole), and an e-mail's subject and
 * text, which sum a burst up (500 nodes gone silent behind one relay are one line and a list,
 * not 500 paragraphs) and list the first events.
 */
import type { DeliveryRecord, EventRecord, SubscriptionRecord } from '../store/store.js';

/** Events an e-mail lists one by one; the rest are counted. */
export const MAX_MAIL_LINES = 100;
/** Node ids a summary line names. */
const MAX_NAMED = 10;

export function webhookBody(sub: SubscriptionRecord, d: DeliveryRecord, events: EventRecord[], sentAt: string): string {
  return JSON.stringify({ delivery: d.id, subscription: sub.id, sent_at: sentAt, events, ...(d.held && { held: d.held }) });
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

const named = (ids: string[]) => `${ids.slice(0, MAX_NAMED).join(', ')}${ids.length > MAX_NAMED ? ` and ${ids.length - MAX_NAMED} more` : ''}`;

/** One line per event type (by relay for node events): the message's summary. */
export function summaryLines(events: EventRecord[]): string[] {
  const byType = new Map<string, EventRecord[]>();
  for (const e of events) byType.set(e.type, [...(byType.get(e.type) ?? []), e]);
  const lines: string[] = [];
  for (const [type, list] of [...byType].sort((a, b) => b[1].length - a[1].length)) {
    if (type.startsWith('node.')) {
      const byRelay = new Map<string, string[]>();
      for (const e of list) {
        const relay = typeof e.data.relay === 'string' ? e.data.relay : 'the server';
        byRelay.set(relay, [...(byRelay.get(relay) ?? []), e.node_id ?? '?']);
      }
      for (const [relay, ids] of byRelay) lines.push(`${type}: ${plural(ids.length, 'node')} behind ${relay === 'the server' ? relay : `relay ${relay}`} (${named(ids)})`);
    } else {
      const nodes = [...new Set(list.map((e) => e.node_id).filter((n): n is string => n !== null))];
      lines.push(`${type}: ${plural(list.length, 'event')}${nodes.length ? ` on ${plural(nodes.length, 'node')} (${named(nodes)})` : ''}`);
    }
  }
  return lines;
}

function eventLine(e: EventRecord): string {
  const d = e.data;
  const what = [d.message, d.reason, d.action, d.component, d.to !== undefined ? `${String(d.from)} → ${String(d.to)}` : undefined]
    .filter((x) => typeof x === 'string' && x !== '').join(' · ');
  return `${e.at}  #${e.id}  ${e.severity.padEnd(7)}  ${e.type}  ${e.node_id ?? '-'}${what ? `  ${what}` : ''}`;
}

export function mailText(sub: SubscriptionRecord, d: DeliveryRecord, events: EventRecord[]): { subject: string; text: string } {
  const summary = summaryLines(events);
  const worst = events.some((e) => e.severity === 'error') ? 'error' : events.some((e) => e.severity === 'warning') ? 'warning' : 'info';
  const subject = `[Capstan ${worst}] ${summary.length === 1 ? summary[0]!.replace(/ \(.*\)$/, '') : `${plural(events.length, 'event')}, ${plural(summary.length, 'kind')}`}`;
  const lines = [
    `Subscription ${sub.name} (${sub.id}), message ${d.id}: ${plural(events.length, 'event')}.`, '',
    ...summary, '',
    ...events.slice(0, MAX_MAIL_LINES).map(eventLine),
    ...(events.length > MAX_MAIL_LINES ? [`… and ${events.length - MAX_MAIL_LINES} more (GET /api/1/events?after=${events[MAX_MAIL_LINES - 1]!.id})`] : []),
  ];
  if (d.held) {
    lines.push('', 'Held back, their nodes flapping (GET /api/1/events?node=<id> has them):');
    for (const [node, n] of Object.entries(d.held)) lines.push(`  ${node}: ${plural(n, 'event')}`);
  }
  return { subject: subject.slice(0, 200), text: `${lines.join('\n')}\n` };
}
