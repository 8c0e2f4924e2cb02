/**
 * RUDDER's shared-files and shared-folder matrix (tests/shared_files.rs, tests/shared_folder.rs,
 * as listed in ../shared/conformance/rudder/MANIFEST.md) against copies of its fixture trees,
 * plus every way out of the root a path can try.
 */
import { existsSync } from 'node:fs';
import { chmod, cp, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { CONFORMANCE, fixturesAbsent, programDir } from '../helpers/programs.js';
import { isExpired, parseMetadata, SharedFilesStore } from '@capstan/relayd/cache/shared-files';
import { NodesList, parseKeyHash } from '@capstan/relayd';
import { raw } from './helpers/raw.js';
import { startTestRelay } from './helpers/relay.js';

const TARGET = '37817c4d-fbf7-4850-a985-50021f4e8f41';
const SOURCE = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const HASH = 'dda78e9b97a69aca3cff21de266246bde0d91bc4b61df72bfb0387564ac0c7bd64dd4caca39ce1ef400f32aa711ec4909789705beec93314eb65fabd5183bbfe';
const FOLDER_HASH = '181210f8f9c779c26da1d9b2075bde0127302ee0e3fca38c9a83f5b1dd8e5d3b';
const FILES = '/rudder/relay-api/1/shared-files';
const FOLDER = `/rudder/relay-api/1/shared-folder/c745a140-40bc-4b86-b6dc-084488fc906b/${TARGET}`;

async function copyTree(from: string, to: string): Promise<void> {
  await cp(from, to, { recursive: true });
  // The fixtures are read-only; the copies must be writable like a real store.
  const walk = async (d: string): Promise<void> => {
    await chmod(d, 0o755);
    for (const e of await readdir(d, { withFileTypes: true })) {
      if (e.isDirectory()) await walk(join(d, e.name));
      else await chmod(join(d, e.name), 0o644);
    }
  };
  await walk(to);
}

const absent = fixturesAbsent();
if (absent) {
  t.comment(`skipping: ${absent}`);
  t.pass('skipped: fixtures absent', { skip: absent });
} else {
  const setup = async (t: Parameters<typeof startTestRelay>[0], extra: Record<string, unknown> = {}) => {
    const dir = programDir(t);
    await copyTree(join(CONFORMANCE, 'api_shared_files'), join(dir, 'shared-files'));
    await copyTree(join(CONFORMANCE, 'api_shared_folder'), join(dir, 'shared-folder'));
    await cp(join(CONFORMANCE, 'files/nodeslist.json'), join(dir, 'nodeslist.json'));
    const r = await startTestRelay(
      t,
      {
        'general.node_id': 'root',
        'general.nodes_list_file': join(dir, 'nodeslist.json'),
        'shared_files.path': join(dir, 'shared-files'),
        'shared_files.max_body_size': '8192',
        'shared_folder.path': join(dir, 'shared-folder'),
        // RUDDER's matrix is run as RUDDER agents fetch: without a node token (relays require one
        // by default; a deployment serving RUDDER agents turns it off like this).
        'identity.require_token': false,
        ...extra,
      },
      { dir },
    );
    const store = join(dir, 'shared-files', TARGET, 'files', SOURCE);
    return { r, dir, store };
  };

  t.test('nodes list: the fixture parses as RUDDER reads it', async (t) => {
    const nodes = NodesList.parse('root', await readFile(join(CONFORMANCE, 'files/nodeslist.json'), 'utf8'));
    t.equal(nodes.size, 6);
    t.equal(nodes.get(SOURCE)!.hostname, 'node1.rudder.local');
    t.equal(nodes.get(SOURCE)!.keyHash!.value.toString('hex'), '23cbad1561a3f8ea6aa5b880219fecf2a442e1f417c50f084558c57b45f52ee8');
    t.equal(nodes.get('b745a140-40bc-4b86-b6dc-084488fc906b')!.keyHash, null, 'no key-hash');
    t.equal(nodes.get('c745a140-40bc-4b86-b6dc-084488fc906b')!.keyHash, null, '"sha256:" is ignored');
    t.same(nodes.neighbours().map((n) => n.hostname).sort(), ['localhost', 'node1.rudder.local', 'server.rudder.local']);
    t.equal(nodes.nextHop('a745a140-40bc-4b86-b6dc-084488fc906b'), SOURCE);
    t.equal(nodes.nextHop('b745a140-40bc-4b86-b6dc-084488fc906b'), SOURCE);
    t.equal(nodes.nextHop(SOURCE), SOURCE, 'a neighbour is its own next hop');
    t.equal(nodes.nextHop('unknown'), null);
    t.same(nodes.subRelays().map((n) => n.id).sort(), [TARGET, SOURCE].sort());
    t.same(parseKeyHash('sha256//ZE9q37dB6Nq+ZJz1cdrfdt+qPL+Xk8sKkLDMTp4QemY=')!.value.toString('hex').slice(0, 8), '644f6adf');
    for (const bad of ['sha256:', 'sha256:zz', 'md5:00', 'sha256//', 'sha256:abcd']) t.equal(parseKeyHash(bad), null, `${bad} ignored`);
    t.ok(isExpired(parseMetadata(await readFile(join(CONFORMANCE, 'files/expired.metadata'), 'utf8'))), 'expired.metadata is expired');
  });

  t.test('shared-files HEAD: 200 for the stored hash, 404 otherwise', async (t) => {
    const { r } = await setup(t);
    const head = (hash: string) => raw(r.url, 'HEAD', `${FILES}/${TARGET}/${SOURCE}/file?hash=${hash}`).then((x) => x.status);
    t.equal(await head(HASH), 200);
    t.equal(await head(`${HASH.slice(0, -1)}3`), 404, 'last character changed');
    t.equal(await head('0xcafecafecafe'), 404);
    t.equal(await head(''), 404);
    t.equal((await raw(r.url, 'HEAD', `${FILES}/${TARGET}/${SOURCE}/nosuchfile?hash=${HASH}`)).status, 404);
  });

  t.test('shared-files PUT: the RUDDER upload matrix', async (t) => {
    const { r, store } = await setup(t);
    const sign = await readFile(join(store, 'file2.sign'), 'utf8');
    const wrong = await readFile(join(store, 'file2.wrongsign'), 'utf8');
    const source = await readFile(join(store, 'file2.source'), 'utf8');
    const putFile = (id: string, body: string, ttl = '1d', target = TARGET, src = SOURCE) =>
      raw(r.url, 'PUT', `${FILES}/${target}/${src}/${id}?ttl=${ttl}`, { body });

    t.equal((await putFile('file2', `${wrong}\n${source}`)).status, 500, 'corrupted digest');
    t.equal((await putFile('file2', `${sign}\ntest`)).status, 500, 'content that is not what was signed');
    t.notOk(existsSync(join(store, 'file2')), 'nothing stored by refused uploads');

    const ok = await putFile('file2', `${sign}\n${source}`);
    t.equal(ok.status, 200);
    t.equal(await readFile(join(store, 'file2'), 'utf8'), source, 'content stored byte for byte');
    const written = parseMetadata(await readFile(join(store, 'file2.metadata'), 'utf8'));
    const { expires, ...fields } = written;
    t.same(fields, parseMetadata(sign), 'the metadata fields as uploaded');
    t.ok(Math.abs(expires! - (Math.floor(Date.now() / 1000) + 86_400)) < 500, 'expires = now + 1 day');

    const before = await readFile(join(store, 'file.metadata'), 'utf8');
    const reserved = await putFile('file.metadata', `${sign}\n${source}`);
    t.equal(reserved.status, 400, 'the .metadata extension is reserved');
    t.equal(await readFile(join(store, 'file.metadata'), 'utf8'), before, 'existing metadata untouched');
    t.equal((await putFile('FILE.METADATA', `${sign}\n${source}`)).status, 400, 'case-insensitively');

    const withExpires = sign.replace(/\n$/, '\nexpires=1\n');
    const p3 = await putFile('file3.properties', `${withExpires}\n${source}`);
    t.equal(p3.status, 200, 'a client expires= is accepted');
    const m3 = await readFile(join(store, 'file3.properties.metadata'), 'utf8');
    t.equal(m3.match(/^expires=/gm)!.length, 1, 'exactly one expires line');
    t.not(parseMetadata(m3).expires, 1, 'and it is the server-computed one');
    t.equal((await raw(r.url, 'HEAD', `${FILES}/${TARGET}/${SOURCE}/file3.properties?hash=${parseMetadata(sign).hash_value}`)).status, 200);

    t.equal((await putFile('file2', `${sign}\n${source}`, '18446744073709551615')).status, 400, 'ttl overflow');
    t.equal((await putFile('file2', `${sign}\n${source}`, 'not-a-duration')).status, 400, 'ttl not a duration');
    t.equal((await putFile('file2', `${sign}\n${source}`, '1hour%202minutes')).status, 200, 'humantime ttl');
    t.equal((await putFile('file2', `${sign}\n${source}`, '913j')).status, 400);
    const big = await putFile('file2', 'x'.repeat(9000));
    t.equal(big.status, 413);
    // RUDDER's statuses, with Capstan's coded JSON bodies (RUDDER sends PAYLOAD TOO LARGE in plain text).
    t.equal(JSON.parse(big.body).error.code, 'ERR_BODY_TOO_LARGE');
    const chunked = await raw(r.url, 'PUT', `${FILES}/${TARGET}/${SOURCE}/file2?ttl=1d`, { body: `${sign}\n${source}`, chunked: true });
    t.equal(chunked.status, 411);
    t.equal(JSON.parse(chunked.body).error.code, 'ERR_LENGTH_REQUIRED');

    t.equal((await putFile('x', `${sign}\n${source}`, '1d', TARGET, 'unknown-node')).status, 404, 'source not below this relay');
    t.equal((await putFile('x', `${sign}\n${source}`, '1d', TARGET, TARGET)).status, 404, "key is not the source's (37817's key-hash is of its .pub file)");
    t.equal((await putFile('x', `${sign}\n${source}`, '1d', TARGET, 'b745a140-40bc-4b86-b6dc-084488fc906b')).status, 500, 'source without key-hash');
    t.equal((await putFile('x', `${sign}\n${source}`, '1d', 'unknown-target')).status, 500, 'unknown target on the root');
    t.equal((await putFile('x', `garbage\n\n${source}`)).status, 500, 'unreadable metadata');
  });

  t.test('shared-files ids that could leave the store are refused with 400', async (t) => {
    const { r, dir } = await setup(t);
    for (const id of ['..', '%2e%2e', '%2E%2E', 'a%2Fb', 'a%5Cb', '.', 'with%20space', '%00']) {
      const res = await raw(r.url, 'PUT', `${FILES}/${TARGET}/${SOURCE}/${id}?ttl=1d`, { body: 'x' });
      t.equal(res.status, 400, `file id ${id}`);
      t.equal((await raw(r.url, 'HEAD', `${FILES}/${id}/${SOURCE}/file?hash=${HASH}`)).status, 400, `target ${id}`);
    }
    t.same((await readdir(join(dir, 'shared-files'))).sort(), [TARGET], 'nothing written outside');
  });

  t.test('shared-files: a relay that is not the root sends unknown targets upstream', async (t) => {
    const { r: root, store, dir } = await setup(t);
    const leafDir = join(dir, 'leaf');
    const leaf = await startTestRelay(t, { 'general.node_id': SOURCE, 'upstream.url': root.url, 'shared_files.path': join(leafDir, 'sf') }, { dir: leafDir });
    const sign = await readFile(join(store, 'file2.sign'), 'utf8');
    const source = await readFile(join(store, 'file2.source'), 'utf8');
    const res = await raw(leaf.url, 'PUT', `${FILES}/${TARGET}/${SOURCE}/fromleaf?ttl=1h`, { body: `${sign}\n${source}` });
    t.equal(res.status, 200, "the root's answer");
    t.equal(await readFile(join(store, 'fromleaf'), 'utf8'), source, 'stored at the root');
    t.equal((await raw(leaf.url, 'HEAD', `${FILES}/${TARGET}/${SOURCE}/fromleaf?hash=${parseMetadata(sign).hash_value}`)).status, 200);
    t.equal((await raw(leaf.url, 'HEAD', `${FILES}/${TARGET}/${SOURCE}/fromleaf?hash=00`)).status, 404);
  });

  t.test('expired shared files are cleaned up; live ones stay', async (t) => {
    const { store, dir } = await setup(t);
    await cp(join(CONFORMANCE, 'files/expired.metadata'), join(store, 'old.file.metadata'));
    await writeFile(join(store, 'old.file'), 'stale');
    const removed = await new SharedFilesStore(join(dir, 'shared-files')).cleanup();
    t.equal(removed, 1);
    t.notOk(existsSync(join(store, 'old.file')));
    t.notOk(existsSync(join(store, 'old.file.metadata')));
    t.ok(existsSync(join(store, 'file')), 'file (expires 2035) kept');
    t.ok(existsSync(join(store, 'file.metadata')));
  });

  t.test('shared-folder: the RUDDER HEAD/GET matrix', async (t) => {
    const { r } = await setup(t);
    const head = (path: string) => raw(r.url, 'HEAD', path).then((x) => x.status);
    t.equal(await head(`${FOLDER}/file?hash_type=sha256&hash=${FOLDER_HASH}`), 304);
    t.equal(await head(`${FOLDER}/file%20with%20space?hash_type=sha256&hash=${FOLDER_HASH}`), 304);
    t.equal(await head(`${FOLDER}/file?hash_type=sha256&hash=${FOLDER_HASH.slice(0, -2)}78`), 200, 'another hash');
    t.equal(await head(`${FOLDER}/file?hash_type=sha256&hash=test`), 400, 'not hex');
    t.equal(await head(`${FOLDER}/file?hash_type=sha256&hash=`), 200, 'no hash');
    t.equal(await head(`${FOLDER}/file`), 200, 'no parameters');
    t.equal(await head(`/rudder/relay-api/1/shared-folder/wrong-node/${TARGET}/file?hash_type=sha256&hash=${FOLDER_HASH}`), 404);
    t.equal(await head(`${FOLDER}/file?hash_type=wrong-hash-type&hash=${FOLDER_HASH}`), 400);
    const sha512 = (await import('node:crypto')).createHash('sha512').update('123\n').digest('hex');
    t.equal(await head(`${FOLDER}/file?hash_type=sha512&hash=${sha512}`), 304, 'sha512');
    const get = await raw(r.url, 'GET', `${FOLDER}/file`);
    t.equal(get.status, 200);
    t.equal(get.body, '123\n');
    const missing = await raw(r.url, 'GET', '/rudder/relay-api/1/shared-folder/c745a140-40bc-4b86-b6dc-084488fc906b/doesnotexist');
    t.equal(missing.status, 404);
    t.equal(JSON.parse(missing.body).error.code, 'ERR_NOT_FOUND');
    t.equal((await raw(r.url, 'GET', `${FOLDER}`)).status, 404, 'a directory is not a file');
  });

  t.test('shared-folder paths that leave the root are refused with 400', async (t) => {
    const { r, dir } = await setup(t);
    await symlink('/etc/passwd', join(dir, 'shared-folder', 'escape'));
    const base = '/rudder/relay-api/1/shared-folder';
    for (const p of ['../../etc/passwd', '%2e%2e/%2e%2e/etc/passwd', '%2E%2E/x', '..%2f..%2fetc%2fpasswd', 'a/..', '..foo', 'a\\..\\b', 'a%5c..%5cb', '/etc/passwd', '%2fetc%2fpasswd', './file', 'a//b', 'a%00b', 'escape']) {
      for (const method of ['GET', 'HEAD']) {
        const res = await raw(r.url, method, `${base}/${p}`);
        t.equal(res.status, 400, `${method} ${p}`);
      }
    }
  });
}
