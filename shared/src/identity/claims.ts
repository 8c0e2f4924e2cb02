/**
 * What a node identity token says, and when its holder renews it: the part of identity tokens an
 * agent needs, without jose (issuing and verifying tokens, identity/token.ts, is the server's and
 * the relays' work; jose is 46 modules an agent run no longer loads).
 *
 * The `capstan_role` claim of a node the server registered as a relay. Only such a token opens
 * what only a relay may do: the remote-run link (`/remote-run/listen/<id>?relay=1`), its output
 * posts and the providers endpoints. Agents' tokens carry no role.
 */
export const RELAY_ROLE = 'relay';
export type NodeRole = typeof RELAY_ROLE;

export interface NodeClaims {
  sub: string;
  capstan_node_id: string;
  capstan_node_group: string;
  capstan_datacenter?: string;
  /** `relay` for a node registered as a relay; absent for agents. */
  capstan_role?: NodeRole;
  iat: number;
  nbf: number;
  exp: number;
  jti: string;
  aud: string;
}

/** Renew when less than a third of the token's life is left (or it is already past). */
export function tokenNeedsRenewal(claims: Pick<NodeClaims, 'iat' | 'exp'>, now = new Date()): boolean {
  const t = now.getTime() / 1000;
  return claims.exp - t < (claims.exp - claims.iat) / 3;
}
