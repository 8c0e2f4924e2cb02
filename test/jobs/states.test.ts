/**
 * The task state machine's table, pair by pair: exactly the transitions the job model names are legal
 * (pending → scheduled → in_progress → done | failed, aborted from any non-final state, failed
 * from any non-final state), everything else is refused with ERR_JOB_TRANSITION; each target
 * state takes only its own reasons.
 */
import t from 'tap';
import { checkTransition, FINAL_STATES, isLegal, REASONS, TASK_STATES, type TaskState } from '@capstan/server/jobs/states';

// The specification, written out independently of the module's table.
const LEGAL = new Set([
  'pending>scheduled', 'pending>failed', 'pending>aborted',
  'scheduled>in_progress', 'scheduled>failed', 'scheduled>aborted',
  'in_progress>done', 'in_progress>failed', 'in_progress>aborted',
]);

t.test('every pair of states is legal exactly when the specification says so', async (t) => {
  t.same([...TASK_STATES].sort(), ['aborted', 'done', 'failed', 'in_progress', 'pending', 'scheduled']);
  let checked = 0;
  for (const from of TASK_STATES) {
    for (const to of TASK_STATES) {
      const legal = LEGAL.has(`${from}>${to}`);
      checked++;
      t.equal(isLegal(from, to), legal, `${from} → ${to} ${legal ? 'allowed' : 'refused'}`);
      const reason = REASONS[to][0];
      if (legal) t.doesNotThrow(() => checkTransition(from, to, reason), `${from} → ${to} (${reason}) passes`);
      else t.throws(() => checkTransition(from, to, reason), { code: 'ERR_JOB_TRANSITION' }, `${from} → ${to} throws`);
    }
  }
  t.equal(checked, 36);
});

t.test('done, failed and aborted are final: nothing leaves them', async (t) => {
  t.same([...FINAL_STATES].sort(), ['aborted', 'done', 'failed']);
  for (const from of FINAL_STATES) for (const to of TASK_STATES) t.notOk(isLegal(from, to), `${from} → ${to}`);
});

t.test('aborted is reachable from every non-final state, with cancelled or timeout only', async (t) => {
  for (const from of TASK_STATES.filter((s) => !FINAL_STATES.has(s))) {
    for (const reason of ['cancelled', 'timeout']) t.doesNotThrow(() => checkTransition(from, 'aborted', reason));
    t.throws(() => checkTransition(from, 'aborted', 'exit_code'), { code: 'ERR_JOB_TRANSITION' });
  }
});

t.test('a reason belongs to its target state', async (t) => {
  const cases: Array<[TaskState, TaskState, string, boolean]> = [
    ['pending', 'scheduled', 'dispatched', true],
    ['pending', 'scheduled', 'started', false],
    ['scheduled', 'in_progress', 'started', true],
    ['in_progress', 'done', 'completed', true],
    ['in_progress', 'done', 'exit_code', false],
    ['in_progress', 'failed', 'exit_code', true],
    ['scheduled', 'failed', 'offline', true],
    ['pending', 'failed', 'not_accepted', true],
    ['pending', 'failed', 'made-up', false],
  ];
  for (const [from, to, reason, ok] of cases) {
    if (ok) t.doesNotThrow(() => checkTransition(from, to, reason), `${from} → ${to} (${reason})`);
    else t.throws(() => checkTransition(from, to, reason), { code: 'ERR_JOB_TRANSITION' }, `${from} → ${to} (${reason}) refused`);
  }
});
