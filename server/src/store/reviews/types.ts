/**
 * Change requests as the store keeps them: read and written whole (the rules of their life are
 * the domain's: server/src/policy/reviews.ts); a status moves only from the one its caller saw.
 */
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { Page } from '../store.js';

export type ChangeRequestStatus = 'open' | 'approved' | 'rejected' | 'deployed';
export const CHANGE_REQUEST_STATUSES: readonly ChangeRequestStatus[] = ['open', 'approved', 'rejected', 'deployed'];

export interface ChangeRequestReview {
  admin: string;
  verdict: 'approved' | 'rejected';
  comment: string;
  at: string;
}

export interface ChangeRequestRecord {
  id: string;
  title: string;
  description: string;
  /** The admin who proposed it. */
  author: string;
  status: ChangeRequestStatus;
  created_at: string;
  updated_at: string;
  /** The proposed objects and deletions (policy/reviews.ts ChangeSet). */
  changes: unknown;
  /** Each touched object's version when proposed. */
  base: unknown;
  /** What deploying it would change, and for which nodes, when proposed (policy/plan.ts Plan). */
  impact: unknown;
  reviews: ChangeRequestReview[];
  deployed_at: string | null;
  deployed_by: string | null;
}

export interface ChangeRequestQuery {
  status?: ChangeRequestStatus;
  page: number;
  per_page: number;
}

export interface ChangeRequestStore {
  insertChangeRequest(r: ChangeRequestRecord): Promise<void>;
  getChangeRequest(id: string): Promise<ChangeRequestRecord | null>;
  /** Newest first. */
  listChangeRequests(q: ChangeRequestQuery): Promise<Page<ChangeRequestRecord>>;
  /**
   * Move a request from `from` to `to` (with a review added, or who deployed it), only if its
   * status is still `from`: false when it is not (another admin acted first) or it is unknown.
   */
  transitionChangeRequest(id: string, from: ChangeRequestStatus, to: ChangeRequestStatus, at: string,
    extra: { review?: ChangeRequestReview; deployed_by?: string }): Promise<boolean>;
}

/** How each method treats U+0000 (guard.ts). */
export const REVIEWS_NUL: NulRules<ChangeRequestStore> = {
  insertChangeRequest: REFUSE,
  getChangeRequest: lookup([0], () => null),
  listChangeRequests: REFUSE,
  transitionChangeRequest: REFUSE,
};
