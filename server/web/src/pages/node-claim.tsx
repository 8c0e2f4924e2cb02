/**
 * A node's open claim on a discovered cloud instance (docs/providers.md, Claims): the identity its
 * inventory names and the discovered row it matches. Nothing moves until it is proved: shown
 * here so that an admin sees it and confirms it (POST /api/1/nodes/<id>/claim/confirm).
 */
import { useGet } from '../ui';

const enc = encodeURIComponent;

interface Claim {
  cloud: { source_id: string; region: string; account_id: string };
  discovered: { id: string; hostname: string; address: string | null; manager: string } | null;
}

export function ClaimNotice({ id }: { id: string }) {
  // 404: no open claim, which is the usual case: nothing is shown.
  const claim = useGet<{ data: Claim }>(`/api/1/nodes/${enc(id)}/claim`);
  const c = claim.data?.data;
  if (!c) return null;
  return (
    <p class="warn" role="note">
      This node's inventory names cloud instance <code>{c.cloud.source_id}</code> ({c.cloud.region}, account {c.cloud.account_id})
      {c.discovered
        ? <>, discovered as <a href={`#/nodes/${enc(c.discovered.id)}`}>{c.discovered.hostname}</a> by manager {c.discovered.manager}. Not joined: an admin confirms the claim with <code>POST /api/1/nodes/{id}/claim/confirm</code>.</>
        : <>, which no discovered node without an agent has.</>}
    </p>
  );
}
