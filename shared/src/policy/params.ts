/**
 * What a method's parameters are, for people and forms: each parameter's name, type (the
 * technique parameters' types, technique.ts), whether it is required, its default, its allowed
 * values and a sentence saying what it does. Kept on the method's spec beside `validate`
 * (methods.ts, specs/*.ts), so the console's directive form and `GET /api/1/methods` read the
 * same spec the server and the agent check with; a test walks every spec and proves the two agree
 * (test/shared/method-params.test.ts: every documented parameter is accepted with its example,
 * every required one refused when absent, every parameter `validate` reads is documented).
 */
import type { ParameterType } from './technique.js';

export interface ParamDoc {
  name: string;
  type: ParameterType;
  /** A sentence: what the parameter does on the node. */
  description: string;
  required?: boolean;
  default?: unknown;
  /** The allowed values of a string. */
  values?: readonly string[];
  /** A string that is text over several lines (file content, a template). */
  multiline?: boolean;
  /** A valid value, which the spec's example takes with it (test/shared/method-params.test.ts). */
  example?: unknown;
  /** Set by the server, not by an admin (a form leaves it out). */
  internal?: boolean;
  /** A map's known fields (command_run's `unless`). */
  fields?: readonly ParamDoc[];
}

type Extra = Omit<ParamDoc, 'name' | 'type' | 'description'>;
const doc = (type: ParameterType) => (name: string, description: string, extra: Extra = {}): ParamDoc => ({ name, type, description, ...extra });

/** Builders by type: `dStr('path', 'the file', { required: true, example: '/etc/a' })`. */
export const dStr = doc('string');
export const dList = doc('list');
export const dFlag = doc('boolean');
export const dNum = doc('number');
export const dMap = doc('map');

/** `path` of a file method: an absolute path, required. */
export const pathParam = (what = 'The file') => dStr('path', `${what}: an absolute path.`, { required: true, example: '/etc/app.conf' });

export const SHOW_DIFF = dFlag('show_diff', 'false keeps what a change changed out of the run log (no diff); secret files never show one.', { default: true, example: false });
export const MODE = dStr('mode', 'Octal mode such as "0644".', { example: '0644' });

/** mode, owner, group, validate and show_diff: what every file-writing method takes (specs/writer.ts). */
export const WRITER_PARAMS: readonly ParamDoc[] = [
  MODE,
  dStr('owner', 'Owner: a user name or a numeric id.', { example: 'root' }),
  dStr('group', 'Group: a group name or a numeric id.', { example: 'root' }),
  dList('validate', 'A checker run on the candidate file before it replaces the file, as a command line list; %s is the candidate\'s path.', { example: ['/usr/bin/test', '-f', '%s'] }),
  SHOW_DIFF,
];
