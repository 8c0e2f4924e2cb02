import t from 'tap';
import { CAPSTAN_VERSION, checkPeerVersion, parsePeerVersion, PROTOCOL_VERSION } from '@capstan/shared';

const self = { major: 2, minor: 5 };

t.test('the User-Agent names the program and its version', async (t) => {
  t.same(parsePeerVersion('capstan-agent/2.5.1'), { program: 'agent', major: 2, minor: 5, patch: 1 });
  t.same(parsePeerVersion('capstan-relayd/2.4.0-rc.1 extra'), { program: 'relayd', major: 2, minor: 4, patch: 0 });
  t.equal(parsePeerVersion('curl/8.0'), null);
  t.equal(parsePeerVersion(undefined), null);
  t.equal(parsePeerVersion('capstan-agent/x'), null);
});

t.test('N and N-1 are accepted; older and newer get coded errors saying which side to upgrade', async (t) => {
  t.ok(checkPeerVersion('capstan-agent/2.5.9', PROTOCOL_VERSION, self));
  t.ok(checkPeerVersion('capstan-agent/2.4.0', PROTOCOL_VERSION, self), 'one minor behind');
  t.throws(() => checkPeerVersion('capstan-agent/2.3.7', PROTOCOL_VERSION, self), { code: 'ERR_PEER_TOO_OLD', statusCode: 426, message: /upgrade it/ });
  t.throws(() => checkPeerVersion('capstan-agent/2.6.0', PROTOCOL_VERSION, self), { code: 'ERR_PEER_TOO_NEW', message: /upgrade this side/ });
  t.throws(() => checkPeerVersion('capstan-agent/1.9.0', PROTOCOL_VERSION, self), { code: 'ERR_PEER_TOO_OLD' }, 'another major');
  t.throws(() => checkPeerVersion('capstan-agent/3.0.0', PROTOCOL_VERSION, self), { code: 'ERR_PEER_TOO_NEW' });
  t.equal(checkPeerVersion('curl/8.0', undefined, self), null, 'non-Capstan peers (RUDDER agents, curl) pass');
  t.throws(() => checkPeerVersion('capstan-agent/2.5.0', '0', self), { code: 'ERR_PEER_TOO_OLD' });
  t.throws(() => checkPeerVersion('capstan-agent/2.5.0', '99', self), { code: 'ERR_PEER_TOO_NEW' });
  t.ok(checkPeerVersion(`capstan-agent/${CAPSTAN_VERSION}`, PROTOCOL_VERSION), 'this build accepts itself');
});
