/**
 * Methods that write a whole file from the policy (file_from_template) or edit part of one
 * (file_block_present, file_key_value, ini_value, file_replace), all through write.ts: atomic
 * writes, mode/owner/group, the `validate` checker, diffs.
 */
import { capstanError } from '@capstan/shared/errors';
import {
  fileBlockPresentSpec, fileFromTemplateSpec, fileKeyValueSpec, fileReplaceSpec, iniValueSpec, type WriterParams,
} from '@capstan/shared/policy/methods';
import { editBlock, editIni, editKeyValues, editReplace } from './edit.js';
import type { Method, MethodContext, Outcome, ParamsOf } from './types.js';
import { convergeParts, filePart, type FileTarget } from './write.js';

/** The target of a directive's own file, with its writer parameters. */
const target = (path: string, p: WriterParams, want: FileTarget['want'], edits: boolean): FileTarget => ({
  path, want, edits, mode: p.mode, owner: p.owner, group: p.group, validate: p.validate,
});

async function convergeOne(ctx: MethodContext, component: string, key: string, t: FileTarget, p: WriterParams, words: { ok: string; repaired: string }): Promise<Outcome> {
  return convergeParts(ctx, component, key, [filePart(t, ctx)], words, { show_diff: p.show_diff });
}

export const fileFromTemplate: Method<ParamsOf<typeof fileFromTemplateSpec>> = {
  ...fileFromTemplateSpec,
  apply: async (p, ctx) => {
    const content = p.content;
    if (content === undefined) {
      // The directive as saved carries the template; the server renders it into every node's bundle.
      const from = p.source !== undefined ? `shared-folder template ${p.source}` : 'template';
      return [{ component: 'File from template', key: p.path, status: 'error', code: 'ERR_METHOD_PARAMS', message: `no rendered content for ${p.path}: the server renders the ${from} into content when it generates the policy` }];
    }
    return [await convergeOne(ctx, 'File from template', p.path, target(p.path, p, () => content, false), p, { ok: `${p.path} is as rendered`, repaired: `${p.path} was written` })];
  },
};

export const fileBlockPresent: Method<ParamsOf<typeof fileBlockPresentSpec>> = {
  ...fileBlockPresentSpec,
  apply: async (p, ctx) => {
    const present = p.state === 'present';
    return [await convergeOne(
      ctx, 'File block', `${p.path}: ${p.name}`, target(p.path, p, (cur) => editBlock(cur, p, p.path), true), p,
      present
        ? { ok: `block ${p.name} is in ${p.path}`, repaired: `block ${p.name} was written to ${p.path}` }
        : { ok: `block ${p.name} is not in ${p.path}`, repaired: `block ${p.name} was removed from ${p.path}` },
    )];
  },
};

export const fileKeyValue: Method<ParamsOf<typeof fileKeyValueSpec>> = {
  ...fileKeyValueSpec,
  apply: async (p, ctx) => {
    const n = Object.keys(p.values).length + p.absent.length;
    return [await convergeOne(
      ctx, 'File key values', p.path, target(p.path, p, (cur) => editKeyValues(cur, p, p.path), true), p,
      { ok: `${p.path} has the ${n} setting${n === 1 ? '' : 's'}`, repaired: `${p.path} settings were set` },
    )];
  },
};

export const iniValue: Method<ParamsOf<typeof iniValueSpec>> = {
  ...iniValueSpec,
  apply: async (p, ctx) => {
    const where = `${p.section === '' ? '' : `[${p.section}] `}${p.key}`;
    return [await convergeOne(
      ctx, 'INI value', `${p.path}: ${where}`, target(p.path, p, (cur) => editIni(cur, p), true), p,
      p.state === 'present'
        ? { ok: `${where} is ${p.value} in ${p.path}`, repaired: `${where} was set to ${p.value} in ${p.path}` }
        : { ok: `${where} is not in ${p.path}`, repaired: `${where} was removed from ${p.path}` },
    )];
  },
};

export const fileReplace: Method<ParamsOf<typeof fileReplaceSpec>> = {
  ...fileReplaceSpec,
  apply: async (p, ctx) => [
    await convergeOne(
      ctx, 'File replace', `${p.path}: ${p.pattern}`,
      target(p.path, p, (cur) => {
        if (cur === null) throw capstanError('ERR_FILE_MISSING', `${p.path} does not exist: nothing to replace in`);
        return editReplace(cur, p, p.path);
      }, true),
      p, { ok: `nothing left to replace in ${p.path}`, repaired: `matches replaced in ${p.path}` },
    ),
  ],
};
