/**
 * Auto-accept rules for nodes that enrol by inventory (RUDDER keeps them pending for an admin;
 * a fleet of 100,000 needs rules). A rule matches by node-id pattern, by hostname pattern, or by
 * a shared enrollment secret the agent puts in its inventory (`enrollment_secret`). The store
 * still never auto-accepts a certificate an admin revoked by deleting its node, and a refused
 * node stays refused.
 *
 * Patterns are comma-separated globs (`*` any run of characters, `?` one character), anchored;
 * hostnames match case-insensitively. The secret is compared in constant time and never logged.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';

export interface EnrollmentConfig {
  auto_accept_node_ids: string;
  auto_accept_hostnames: string;
  secret: string;
}

export interface EnrollmentRules {
  nodeIds: string[];
  hostnames: string[];
  secretDigest: Buffer | null;
}

/** The inventory field that carries the shared secret; it is removed before the inventory is stored. */
export const SECRET_FIELD = 'enrollment_secret';
export const MIN_SECRET_LENGTH = 16;
const MAX_PATTERNS = 100;

/**
 * Glob match in O(pattern × text), without a regular expression: a glob such as `a*a*a*b`
 * turned into a RegExp backtracks exponentially on a hostile hostname.
 */
export function globMatch(glob: string, text: string): boolean {
  let p = 0;
  let t = 0;
  let star = -1;
  let mark = 0;
  while (t < text.length) {
    if (p < glob.length && glob[p] === '*') {
      star = p++;
      mark = t;
    } else if (p < glob.length && (glob[p] === '?' || glob[p] === text[t])) {
      p++;
      t++;
    } else if (star >= 0) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < glob.length && glob[p] === '*') p++;
  return p === glob.length;
}

function globs(list: string, key: string): string[] {
  const items = list.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (items.length > MAX_PATTERNS) throw capstanError('ERR_CONFIG', `enrollment.${key} has more than ${MAX_PATTERNS} patterns`);
  return items;
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/** Check and compile the [enrollment] section (ERR_CONFIG, so a bad value stops the start-up). */
export function enrollmentRules(cfg: EnrollmentConfig): EnrollmentRules {
  if (cfg.secret !== '' && cfg.secret.length < MIN_SECRET_LENGTH) {
    throw capstanError('ERR_CONFIG', `enrollment.secret must be at least ${MIN_SECRET_LENGTH} characters (or empty to disable it)`);
  }
  return {
    nodeIds: globs(cfg.auto_accept_node_ids, 'auto_accept_node_ids'),
    // Hostnames are case-insensitive (DNS): compare lower-cased.
    hostnames: globs(cfg.auto_accept_hostnames, 'auto_accept_hostnames').map((g) => g.toLowerCase()),
    secretDigest: cfg.secret === '' ? null : digest(cfg.secret),
  };
}

/** The cause to record when a rule accepts this node, or null when none does. */
export function autoAcceptCause(rules: EnrollmentRules, n: { nodeId: string; hostname: string; secret: unknown }): string | null {
  if (rules.secretDigest && typeof n.secret === 'string' && n.secret.length > 0 && timingSafeEqual(digest(n.secret), rules.secretDigest)) {
    return 'auto-accept: enrollment secret';
  }
  const byId = rules.nodeIds.find((g) => globMatch(g, n.nodeId));
  if (byId !== undefined) return `auto-accept: node id matches ${byId}`;
  const host = n.hostname.toLowerCase();
  const byHost = rules.hostnames.find((g) => globMatch(g, host));
  if (byHost !== undefined) return `auto-accept: hostname matches ${byHost}`;
  return null;
}
