/**
 * Version skew between peers. Every Capstan upload and API request carries
 * `User-Agent: capstan-<program>/<version>` and `X-Capstan-Protocol`; a relay or server accepts
 * peers of its own minor version and one minor behind (N-1), so a fleet can be upgraded root
 * first, then relays, then agents. Anything else gets a coded error that says which side to
 * upgrade. Peers that are not Capstan programs (RUDDER agents, curl) carry no such header and are
 * accepted: the relay API stays RUDDER's.
 */
import { capstanError } from './errors.js';
import { CAPSTAN_VERSION, PROTOCOL_VERSION } from './protocol.js';

export interface PeerVersion {
  program: string;
  major: number;
  minor: number;
  patch: number;
}

const UA = /^capstan-(agent|relayd|server|sim)\/(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+][0-9A-Za-z.-]*)?(?:\s|$)/;

export function parsePeerVersion(userAgent: string | undefined): PeerVersion | null {
  const m = userAgent ? UA.exec(userAgent) : null;
  return m ? { program: m[1]!, major: Number(m[2]), minor: Number(m[3]), patch: Number(m[4]) } : null;
}

function own(): { major: number; minor: number } {
  const [major, minor] = CAPSTAN_VERSION.split('.').map(Number);
  return { major: major!, minor: minor! };
}

/**
 * Throws ERR_PEER_TOO_OLD (426) or ERR_PEER_TOO_NEW (400) when a Capstan peer is outside the
 * supported window [N-1, N] of this program's major.minor, or speaks another protocol version.
 */
export function checkPeerVersion(userAgent: string | undefined, protocol: string | undefined, self = own()): PeerVersion | null {
  if (protocol !== undefined && protocol !== PROTOCOL_VERSION) {
    const n = Number(protocol);
    if (Number.isInteger(n) && n > Number(PROTOCOL_VERSION)) {
      throw capstanError('ERR_PEER_TOO_NEW', `protocol ${protocol} is newer than this side's ${PROTOCOL_VERSION}: upgrade this side first`);
    }
    throw capstanError('ERR_PEER_TOO_OLD', `protocol ${protocol} is not supported (this side speaks ${PROTOCOL_VERSION}): upgrade the sender`);
  }
  const peer = parsePeerVersion(userAgent);
  if (!peer) return null;
  const rank = (v: { major: number; minor: number }) => v.major * 10_000 + v.minor;
  const mine = rank(self);
  const theirs = rank(peer);
  // Across a major boundary, N-1 is the last minor of the previous major: accept only same major.
  if (theirs > mine) {
    throw capstanError('ERR_PEER_TOO_NEW', `${peer.program} ${peer.major}.${peer.minor} is newer than this side's ${self.major}.${self.minor}: upgrade this side first`);
  }
  if (peer.major !== self.major || self.minor - peer.minor > 1) {
    throw capstanError('ERR_PEER_TOO_OLD', `${peer.program} ${peer.major}.${peer.minor} is older than ${self.major}.${Math.max(self.minor - 1, 0)}: upgrade it`);
  }
  return peer;
}
