/**
 * `capstan policy diff/apply/export` read and write only inside the policy directory. They used
 * to follow symbolic links: a `directives/x.toml` (or a whole `rules/`) linking elsewhere was read
 * and sent to the server, and an export wrote (or with --force, deleted) through such links.
 */
import { lstat, mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { readPolicyDir, writePolicyDir } from '@capstan/server/admin-cli/policy-files';

const FILES = {
  directives: [{ id: 'motd', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' }, mode: 'enforce' }],
  groups: [{ id: 'web', name: 'Web', filter: [{ key: 'name', values: ['web*'] }] }],
  rules: [{ id: 'base', name: 'Base', directives: ['motd'], groups: ['web'] }],
  techniques: [],
};

const SECRET = 'name = "root-only secret"\n';

t.test('reading refuses a link, to a file or a directory, inside or outside the policy directory', async (t) => {
  const cases: Array<[string, (dir: string, outside: string) => Promise<void>]> = [
    ['a file linking outside', async (dir, outside) => symlink(join(outside, 'secret.toml'), join(dir, 'directives', 'motd.toml'))],
    ['a file linking inside', async (dir) => {
      await writeFile(join(dir, 'groups', 'web.toml'), 'name = "Web"\n');
      await symlink(join(dir, 'groups', 'web.toml'), join(dir, 'directives', 'motd.toml'));
    }],
    ['a relative link', async (dir) => symlink('../../outside/secret.toml', join(dir, 'directives', 'motd.toml'))],
    ['a kind directory linking outside', async (dir, outside) => symlink(outside, join(dir, 'rules'))],
    ['a link to a directory under a stray name', async (dir, outside) => symlink(outside, join(dir, 'extra'))],
  ];
  for (const [what, make] of cases) {
    const root = t.testdir({ outside: { 'secret.toml': SECRET } });
    const dir = join(root, 'policy');
    await mkdir(join(dir, 'directives'), { recursive: true });
    await mkdir(join(dir, 'groups'), { recursive: true });
    await make(dir, join(root, 'outside'));
    const err = await readPolicyDir(dir).then(() => null, (e: unknown) => e as { code?: string; message: string });
    t.equal(err?.code, 'ERR_POLICY_FILE', `${what}: refused`);
    t.notMatch(err?.message ?? '', /root-only secret/, `${what}: nothing of the target in the error`);
  }
});

t.test('export never writes or deletes through a link', async (t) => {
  for (const force of [false, true]) {
    const root = t.testdir({ outside: { 'secret.toml': SECRET, 'motd.toml': SECRET } });
    const outside = join(root, 'outside');
    // A kind directory that is a link: nothing written into, nor removed from, its target.
    const a = join(root, 'a');
    await mkdir(a);
    await symlink(outside, join(a, 'directives'));
    await t.rejects(writePolicyDir(a, FILES, 'toml', force), { code: 'ERR_POLICY_FILE' }, `force=${force}: a linked kind directory`);
    t.same((await readdir(outside)).sort(), ['motd.toml', 'secret.toml'], 'the target directory is as it was');
    t.equal(await readFile(join(outside, 'motd.toml'), 'utf8'), SECRET);
    // A file where the export writes one, linking outside: the target is not overwritten.
    const b = join(root, 'b');
    await mkdir(join(b, 'directives'), { recursive: true });
    await symlink(join(outside, 'secret.toml'), join(b, 'directives', 'motd.toml'));
    const wrote = await writePolicyDir(b, FILES, 'toml', force).then(() => true, (e: { code?: string }) => {
      t.equal(e.code, 'ERR_POLICY_FILE', `force=${force}: refused with a code`);
      return false;
    });
    t.equal(await readFile(join(outside, 'secret.toml'), 'utf8'), SECRET, `force=${force}: the link's target is untouched`);
    if (wrote) t.notOk((await lstat(join(b, 'directives', 'motd.toml'))).isSymbolicLink(), 'the link was replaced by a file of its own');
  }
});
