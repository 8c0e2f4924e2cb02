/**
 * Rollback protection (docs/policy.md, Rollback): the highest bundle generation this agent applied
 * is kept in its state directory, and a fresh bundle with a lower one — an older bundle, validly
 * signed, that a relay serves again — is refused with ERR_POLICY_ROLLBACK (the last good policy
 * still runs, and the refusal is a `result_error` in the run log).
 *
 * The floor belongs to one node id and one trust root (the configured policy key's id, or `tofu`
 * for a key pinned on first use): re-enrolment under a new node id, or configuring another
 * server's key, starts over from zero. A rotation followed through the server's endorsements keeps
 * it (the same server goes on counting). Deleting the file resets it by hand.
 */
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
import type { PolicyBundle } from '@capstan/shared/policy/bundle';
import { writeAtomic } from '../identity/state.js';

export const GENERATION_FILE = 'policy.generation';

export interface GenerationFloor {
  node_id: string;
  root: string;
  generation: number;
}

const fileOf = (stateDir: string) => join(stateDir, GENERATION_FILE);

/** The floor kept for this node and trust root; 0 when none, another node's or another root's. */
export async function generationFloor(stateDir: string, nodeId: string, root: string): Promise<number> {
  let f: Partial<GenerationFloor>;
  try {
    f = JSON.parse(await readFile(fileOf(stateDir), 'utf8')) as Partial<GenerationFloor>;
  } catch {
    return 0;
  }
  if (!f || f.node_id !== nodeId || f.root !== root) return 0;
  return Number.isSafeInteger(f.generation) && (f.generation as number) > 0 ? (f.generation as number) : 0;
}

/** Refuse a bundle below the floor (one without a generation counts as 0). */
export function checkGeneration(bundle: PolicyBundle, floor: number): void {
  const gen = bundle.generation ?? 0;
  if (gen < floor) {
    throw capstanError('ERR_POLICY_ROLLBACK', `bundle ${bundle.config_id} has generation ${gen}, older than generation ${floor} this node applied already (a relay served an old bundle)`);
  }
}

/** Raise the floor to an accepted bundle's generation. */
export async function raiseGeneration(stateDir: string, nodeId: string, root: string, floor: number, bundle: PolicyBundle): Promise<void> {
  const gen = bundle.generation ?? 0;
  if (gen <= floor) return;
  const record: GenerationFloor = { node_id: nodeId, root, generation: gen };
  await writeAtomic(fileOf(stateDir), `${JSON.stringify(record)}\n`, 0o600);
}
