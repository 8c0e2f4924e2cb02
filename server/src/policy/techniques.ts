/**
 * Techniques as policy objects (docs/policy.md "Techniques"): the rules between a technique and
 * the directives that instantiate it. A directive names a technique by id and version and gives
 * the values of its parameters; both are checked against the stored technique when either is
 * saved, so a generation never meets a directive whose technique is gone or whose values no
 * longer fit. Pure functions over the model: the service (service.ts) and a plan (plan.ts)
 * apply them alike.
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { TECHNIQUE_METHOD, type Directive } from '@capstan/shared/policy/bundle';
import { checkValues, type Technique } from '@capstan/shared/policy/technique';

/** Whether a directive instantiates technique `id` (any technique when absent). */
export function usesTechnique(d: Directive, id?: string): boolean {
  return d.method === TECHNIQUE_METHOD && d.technique !== undefined && (id === undefined || d.technique.id === id);
}

/** The directives instantiating technique `id`, in id order. */
export function techniqueUsers(directives: Iterable<Directive>, id: string): Directive[] {
  return [...directives].filter((d) => usesTechnique(d, id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * A technique directive against the techniques: the technique exists at the version it names,
 * and its params are values of that technique's parameters (unknown, missing when required, of
 * the wrong type: `params.<name>`). Plain directives pass.
 */
export function checkTechniqueUse(d: Directive, techniques: ReadonlyMap<string, Technique>): void {
  if (!usesTechnique(d)) return;
  const ref = d.technique!;
  const t = techniques.get(ref.id);
  if (!t) throw capstanError('ERR_BAD_REQUEST', `directive ${d.id} names technique ${ref.id}, which does not exist`, { details: { field: 'technique.id' } });
  if (t.version !== ref.version) {
    throw capstanError('ERR_BAD_REQUEST', `directive ${d.id} names technique ${ref.id} version ${ref.version}; the technique is at version ${t.version}`, { details: { field: 'technique.version' } });
  }
  try {
    checkValues(t, d.params);
  } catch (err) {
    if (!isCapstanError(err)) throw err;
    throw capstanError('ERR_METHOD_PARAMS', err.message, { details: { ...err.details } });
  }
}

/**
 * What saving technique `t` means for the directives using it: each one's values are checked
 * against the new technique (a refusal is ERR_CONFLICT naming the directive), and those pinned
 * to another version follow it — returned, to be saved with the technique.
 */
export function followTechnique(t: Technique, users: readonly Directive[]): Directive[] {
  const moved: Directive[] = [];
  for (const d of users) {
    try {
      checkValues(t, d.params);
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      throw capstanError('ERR_CONFLICT', `directive ${d.id} uses technique ${t.id} and its values would no longer fit: ${err.message}`, { details: { field: 'parameters' } });
    }
    if (d.technique!.version !== t.version) moved.push({ ...d, technique: { id: t.id, version: t.version } });
  }
  return moved;
}
